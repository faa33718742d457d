//! `docs/configuration.md`, the reference of every field of `weir.toml`, is generated
//! from the config types' doc comments (parsed with syn), so it cannot drift: this test
//! fails when the file differs from what the sources say, or when a field has no doc
//! comment. `WEIR_BLESS=1 cargo test -p weir --test config_reference` rewrites it.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use quote::ToTokens;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The files that hold the config types.
const SOURCES: &[&str] = &[
    "crates/weir/src/config/model.rs",
    "crates/weir/src/builtin/runtime_kinds.rs",
    "crates/weir/src/builtin/archiver.rs",
    "crates/weir/src/multilang/consumer.rs",
    "consumers/alerting/src/consumer.rs",
    "consumers/alerting/src/rule.rs",
    "consumers/enrichment/src/enricher.rs",
    "consumers/iceberg/src/config.rs",
    "consumers/iceberg/src/lambda_config.rs",
];

struct Field {
    name: String,
    ty: syn::Type,
    doc: String,
    skipped: bool,
}

enum Item {
    Struct {
        fields: Vec<Field>,
    },
    /// Enum variants: the TOML name, doc, and fields (named or one boxed/newtype type).
    Enum {
        tagged: bool,
        variants: Vec<(String, String, Vec<Field>, Option<syn::Type>)>,
    },
}

fn doc(attrs: &[syn::Attribute]) -> String {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            syn::Meta::NameValue(nv) => match &nv.value {
                syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => Some(s.value().trim().to_owned()),
                _ => None,
            },
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The text of every `#[serde(...)]` attribute.
fn serde_attrs(attrs: &[syn::Attribute]) -> String {
    attrs.iter().filter(|a| a.path().is_ident("serde")).map(|a| a.to_token_stream().to_string()).collect()
}

fn fields(fields: &syn::Fields) -> Vec<Field> {
    fields
        .iter()
        .filter_map(|f| {
            let serde = serde_attrs(&f.attrs);
            // `#[serde(rename = "type")]`
            let renamed = serde.split("rename = \"").nth(1).and_then(|r| r.split('"').next()).map(str::to_owned);
            Some(Field {
                name: renamed.unwrap_or(f.ident.as_ref()?.to_string()),
                ty: f.ty.clone(),
                doc: doc(&f.attrs),
                skipped: (serde.contains("skip") && !serde.contains("skip_serializing_if"))
                    || serde.contains("flatten"),
            })
        })
        .collect()
}

fn rename(variant: &str, rule: &str) -> String {
    let mut snake = String::new();
    for (i, c) in variant.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            snake.push('_');
        }
        snake.push(c.to_ascii_lowercase());
    }
    match rule {
        "lowercase" => variant.to_lowercase(),
        "kebab-case" => snake.replace('_', "-"),
        "SCREAMING_SNAKE_CASE" => snake.to_uppercase(),
        _ => snake,
    }
}

fn items() -> BTreeMap<String, Item> {
    let mut out = BTreeMap::new();
    for src in SOURCES {
        let text = std::fs::read_to_string(root().join(src)).unwrap();
        let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{src}: {e}"));
        for item in file.items {
            match item {
                syn::Item::Struct(s)
                    if s.attrs.iter().any(|a| a.to_token_stream().to_string().contains("Deserialize")) =>
                {
                    out.insert(s.ident.to_string(), Item::Struct { fields: fields(&s.fields) });
                }
                syn::Item::Enum(e)
                    if e.attrs.iter().any(|a| a.to_token_stream().to_string().contains("Deserialize")) =>
                {
                    let serde = serde_attrs(&e.attrs);
                    let rule = ["lowercase", "kebab-case", "SCREAMING_SNAKE_CASE", "snake_case"]
                        .into_iter()
                        .find(|r| serde.contains(&format!("\"{r}\"")))
                        .unwrap_or("snake_case");
                    let variants = e
                        .variants
                        .iter()
                        .map(|v| {
                            let newtype = match &v.fields {
                                syn::Fields::Unnamed(u) => u.unnamed.first().map(|f| f.ty.clone()),
                                _ => None,
                            };
                            (rename(&v.ident.to_string(), rule), doc(&v.attrs), fields(&v.fields), newtype)
                        })
                        .collect();
                    out.insert(e.ident.to_string(), Item::Enum { tagged: serde.contains("tag"), variants });
                }
                _ => {}
            }
        }
    }
    out
}

/// The innermost type name of `Option<…>`, `Vec<…>`, `Box<…>` and paths.
fn inner(ty: &syn::Type) -> (String, bool) {
    let syn::Type::Path(p) = ty else { return (ty.to_token_stream().to_string(), false) };
    let last = p.path.segments.last().unwrap();
    let name = last.ident.to_string();
    if let syn::PathArguments::AngleBracketed(args) = &last.arguments
        && let Some(syn::GenericArgument::Type(t)) = args.args.first()
        && ["Option", "Vec", "Box"].contains(&name.as_str())
    {
        let (n, _) = inner(t);
        return (n, name == "Vec");
    }
    (name, false)
}

/// A type as a user reads it.
fn shown(ty: &syn::Type, items: &BTreeMap<String, Item>) -> String {
    let text = ty.to_token_stream().to_string().replace(' ', "");
    let (name, list) = inner(ty);
    let base = match name.as_str() {
        "Duration" => "duration (\"10s\", \"500ms\")".to_owned(),
        "PathBuf" => "path".to_owned(),
        "SocketAddr" => "address (\"127.0.0.1:9090\")".to_owned(),
        "usize" | "u32" | "u64" | "i64" => "integer".to_owned(),
        "f64" => "number".to_owned(),
        "bool" => "boolean".to_owned(),
        "String" => "string".to_owned(),
        "Value" => "table (Firehose field names)".to_owned(),
        "BTreeMap" => "table of strings".to_owned(),
        other => match items.get(other) {
            Some(Item::Enum { tagged: false, variants }) => {
                variants.iter().map(|v| format!("\"{}\"", v.0)).collect::<Vec<_>>().join(" \\| ")
            }
            Some(_) => "table".to_owned(),
            None => other.to_owned(),
        },
    };
    let base = if list { format!("list of {base}") } else { base };
    if text.starts_with("Option<") { format!("{base}, optional") } else { base }
}

fn table(
    out: &mut String,
    heading: &str,
    fields: &[Field],
    items: &BTreeMap<String, Item>,
    nested: &mut Vec<(String, String)>,
) {
    writeln!(out, "\n### `{heading}`\n\n| field | type | meaning |\n|---|---|---|").unwrap();
    for f in fields.iter().filter(|f| !f.skipped) {
        assert!(!f.doc.is_empty(), "{heading}.{}: no doc comment", f.name);
        writeln!(out, "| `{}` | {} | {} |", f.name, shown(&f.ty, items), f.doc.replace('|', "\\|")).unwrap();
        let (name, list) = inner(&f.ty);
        if matches!(items.get(&name), Some(Item::Struct { .. }) | Some(Item::Enum { tagged: true, .. })) {
            // `[[consumers]] type = "x"` -> `consumers`
            let path = heading.split(' ').next().unwrap().trim_matches(|c| c == '[' || c == ']').to_owned();
            let sub = format!("{path}.{}", f.name);
            nested.push((if list { format!("[[{sub}]]") } else { format!("[{sub}]") }, name));
        }
    }
}

fn render_item(out: &mut String, heading: &str, name: &str, items: &BTreeMap<String, Item>) {
    let mut nested = Vec::new();
    match &items[name] {
        Item::Struct { fields } => table(out, heading, fields, items, &mut nested),
        Item::Enum { variants, .. } => {
            for (tag, vdoc, vfields, newtype) in variants {
                let head = format!("{heading} type = \"{tag}\"");
                match newtype.as_ref().map(inner) {
                    Some((boxed, _)) if matches!(items.get(&boxed), Some(Item::Struct { .. })) => {
                        writeln!(out, "\n{vdoc}").unwrap();
                        render_item(out, &head, &boxed, items);
                    }
                    _ => {
                        writeln!(out, "\n{vdoc}").unwrap();
                        table(out, &head, vfields, items, &mut nested);
                    }
                }
            }
        }
    }
    for (sub, ty) in nested {
        render_item(out, &sub, &ty, items);
    }
}

fn generate() -> String {
    let items = items();
    let mut out = String::from(
        "# weir.toml reference\n\nEvery field of the configuration `weir run`, `weir replay` and `weir config check` read, generated from the config types' doc comments by `crates/weir/tests/config_reference.rs` (`WEIR_BLESS=1 cargo test -p weir --test config_reference` after changing them). Each field can also be set with `WEIR_<SECTION>__<FIELD>` (e.g. `WEIR_WORKER__FAILOVER=5s`); the whole file can be given as `WEIR_CONFIG_TOML`. Durations are humantime strings (`\"10s\"`, `\"1m\"`).\n",
    );
    let Item::Struct { fields } = &items["Config"] else { panic!("Config is a struct") };
    for f in fields {
        let (ty, list) = inner(&f.ty);
        let heading = if list { format!("[[{}]]", f.name) } else { format!("[{}]", f.name) };
        writeln!(out, "\n## `{heading}`\n\n{}", f.doc).unwrap();
        render_item(&mut out, &heading, &ty, &items);
        if ty == "ConsumerEntry" {
            render_kinds(&mut out, &items);
        }
    }
    out
}

/// The built-in consumer kinds and the type of each one's fields (`None`: no fields).
const KINDS: &[(&str, Option<&str>, &str)] = &[
    ("count", None, "Counts records and bytes per shard; acknowledges at once."),
    ("log", None, "Logs one line per batch."),
    ("files", Some("FilesSection"), "Gzip NDJSON objects per shard."),
    ("archiver", Some("ArchiverSection"), "Firehose-compatible S3 (or local directory) delivery."),
    ("alerting", Some("AlertingConfig"), "Windowed alert rules."),
    ("enrichment", Some("EnrichmentConfig"), "Normalise, enrich and republish."),
    (
        "iceberg",
        Some("IcebergConfig"),
        "Append records to an Iceberg table, exactly once (in progress: the embedded SQL catalog).",
    ),
    ("multilang", Some("MultiLangSection"), "KCL MultiLang record processors, one child process per shard."),
];

/// Each kind's own fields (`name` is the entry's, above).
fn render_kinds(out: &mut String, items: &BTreeMap<String, Item>) {
    for (kind, ty, about) in KINDS {
        let head = format!("[[consumers]] type = \"{kind}\"");
        writeln!(out, "\n{about}").unwrap();
        match ty {
            None => writeln!(out, "\n### `{head}`\n\nNo fields besides `type` and `name`.").unwrap(),
            Some(ty) => {
                let Item::Struct { fields } = &items[*ty] else { panic!("{ty} is a struct") };
                let own: Vec<Field> = fields
                    .iter()
                    .filter(|f| f.name != "name")
                    .map(|f| Field { name: f.name.clone(), ty: f.ty.clone(), doc: f.doc.clone(), skipped: f.skipped })
                    .collect();
                let mut nested = Vec::new();
                table(out, &head, &own, items, &mut nested);
                for (sub, t) in nested {
                    render_item(out, &sub, &t, items);
                }
            }
        }
    }
}

#[test]
fn the_configuration_reference_is_generated_from_the_doc_comments() {
    let path = root().join("docs/configuration.md");
    let generated = generate();
    for field in ["kinesis_endpoint_url", "efo_consumer", "max_active_partitions", "topic_arn", "cloudwatch", "command"]
    {
        assert!(generated.contains(&format!("| `{field}` |")), "{field} is documented");
    }
    if std::env::var("WEIR_BLESS").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &generated).unwrap();
    }
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        current == generated,
        "docs/configuration.md is stale: WEIR_BLESS=1 cargo test -p weir --test config_reference"
    );
}

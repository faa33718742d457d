//! README.md and docs/*.md kept honest against the code:
//! - every ```toml block is a whole weir config that loads (`weir::App::check_config`)
//!   (the built-in kinds registered, every cross-field check run); a block fenced
//!   ```toml fragment (a piece of a config, `# ...` left out) must at least be TOML;
//! - every `weir ...` command in ```sh, ```bash and ```console blocks (in console
//!   blocks, the `$ ` lines) parses with weir's command line, as do the arguments of
//!   `cargo run -p weir -- ...` and of the plugin example's `weir-tool-minutes`: a
//!   command that no longer exists, a renamed flag or a malformed value fails here;
//! - every relative link between the pages points at a file inside the repository that
//!   exists, and a `#fragment` at a heading of the page it names.
//!
//! Command lines are read the way a shell splits them (quotes, `\` continuations,
//! comments, `|`, `&&`, `;` and redirections, `NAME=value` prefixes); synopsis notation
//! is accepted: `[--flag value]` is checked as if given, `<placeholder>` is one value.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// README.md and every page under docs/, as (path relative to the root, text).
fn pages() -> Vec<(PathBuf, String)> {
    let mut paths = vec![PathBuf::from("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| Path::new("docs").join(p.file_name().unwrap()))
        .collect();
    docs.sort();
    paths.extend(docs);
    paths.into_iter().map(|p| (p.clone(), std::fs::read_to_string(root().join(&p)).unwrap())).collect()
}

/// A fenced code block: its info string, the line its first content line is on, and its lines.
struct Block {
    info: String,
    line: usize,
    lines: Vec<String>,
}

/// The fenced blocks of a page, and the page's lines outside them (with their numbers).
fn split(text: &str) -> (Vec<Block>, Vec<(usize, String)>) {
    let mut blocks = Vec::new();
    let mut prose = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        match open.take() {
            None => match line.strip_prefix("```") {
                Some(info) => open = Some(Block { info: info.trim().to_owned(), line: n + 1, lines: Vec::new() }),
                None => prose.push((n, line.to_owned())),
            },
            Some(mut b) => {
                if line.trim_start().starts_with("```") {
                    blocks.push(b);
                } else {
                    b.lines.push(line.to_owned());
                    open = Some(b);
                }
            }
        }
    }
    assert!(open.is_none(), "a code fence is never closed");
    (blocks, prose)
}

// ---------------------------------------------------------------- config snippets

#[test]
fn toml_blocks_are_configs_weir_loads() {
    let app = weir::App::new();
    let (mut whole, mut fragments) = (0, 0);
    let mut problems = Vec::new();
    for (path, text) in pages() {
        for b in split(&text).0 {
            let mut words = b.info.split_whitespace();
            if words.next() != Some("toml") {
                continue;
            }
            let body = b.lines.join("\n");
            let at = format!("{}:{}", path.display(), b.line);
            if words.any(|w| w == "fragment") {
                fragments += 1;
                if let Err(e) = toml::from_str::<toml::Table>(&body) {
                    problems.push(format!("{at}: not TOML: {e}"));
                }
            } else {
                whole += 1;
                if let Err(e) = app.check_config(&body) {
                    problems.push(format!(
                        "{at}: weir does not load this config (fence it ```toml fragment if it is a piece of one): {e:#}"
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
    println!("{whole} configs loaded, {fragments} fragments parsed as TOML");
    assert!(whole >= 3, "only {whole} whole configs found in the docs: is the fence detection broken?");
}

// ---------------------------------------------------------------- commands

/// Splits a shell command line into commands of words: quotes and escapes resolved,
/// comments dropped, split at `|`, `||`, `&&` and `;`, redirections and their targets
/// dropped; `<placeholder>` is one word and `[`/`]` of optional parts are removed.
fn shell_commands(line: &str) -> Vec<Vec<String>> {
    let mut commands = vec![Vec::new()];
    let mut chars = line.chars().peekable();
    let mut skip_next_word = false;
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let Some(&c) = chars.peek() else { break };
        match c {
            '#' => break,
            // `|`, `||`, `;`, `&`, `&&`: the next command starts.
            '|' | ';' | '&' => {
                chars.next();
                if chars.peek() == Some(&c) {
                    chars.next();
                }
                commands.push(Vec::new());
                continue;
            }
            '<' => {
                chars.next();
                if chars.peek().is_some_and(|c| !c.is_whitespace()) {
                    // A placeholder such as `<KCL lease table>`: one value.
                    for c in chars.by_ref() {
                        if c == '>' {
                            break;
                        }
                    }
                    commands.last_mut().unwrap().push("PLACEHOLDER".to_owned());
                } else {
                    skip_next_word = true;
                }
                continue;
            }
            '>' => {
                chars.next();
                if chars.peek() == Some(&'>') {
                    chars.next();
                }
                if chars.peek() == Some(&'&') {
                    // `>&2`: the target is part of the operator.
                    chars.next();
                    while chars.peek().is_some_and(|c| c.is_ascii_digit()) {
                        chars.next();
                    }
                } else {
                    skip_next_word = true;
                }
                continue;
            }
            _ => {}
        }
        let mut word = String::new();
        while let Some(&c) = chars.peek() {
            if c.is_whitespace() || matches!(c, '|' | ';' | '&' | '>' | '<') {
                break;
            }
            chars.next();
            match c {
                '\'' => word.extend(chars.by_ref().take_while(|&c| c != '\'')),
                '"' => {
                    while let Some(c) = chars.next() {
                        match c {
                            '"' => break,
                            '\\' => word.extend(chars.next()),
                            c => word.push(c),
                        }
                    }
                }
                '\\' => word.extend(chars.next()),
                c => word.push(c),
            }
        }
        // `2>&1`, `2>file`: a descriptor number right before a redirection.
        if chars.peek() == Some(&'>') && !word.is_empty() && word.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        if std::mem::take(&mut skip_next_word) {
            continue;
        }
        let word = word.trim_start_matches('[').trim_end_matches(']').to_owned();
        if !word.is_empty() && word != "…" && word != "..." {
            commands.last_mut().unwrap().push(word);
        }
    }
    commands.into_iter().filter(|c| !c.is_empty()).collect()
}

/// The arguments a shell command gives weir's command line (program name first), if it
/// runs weir: `weir ...`, `./target/release/weir ...`, the plugin example's
/// `weir-tool-minutes ...` (the same command line), or `cargo run -p weir -- ...`.
fn weir_args(command: &[String]) -> Option<Vec<String>> {
    let start = command.iter().position(|w| !is_assignment(w))?;
    let command = &command[start..];
    let program = command[0].rsplit('/').next().unwrap();
    if program == "weir" || program == "weir-tool-minutes" {
        return Some(command.to_vec());
    }
    if program == "cargo" && command.get(1).is_some_and(|w| w == "run") {
        let package = command.windows(2).find(|w| w[0] == "-p" || w[0] == "--package").map(|w| w[1].as_str());
        let dashes = command.iter().position(|w| w == "--")?;
        if package == Some("weir") {
            let mut args = vec!["weir".to_owned()];
            args.extend(command[dashes + 1..].iter().cloned());
            return Some(args);
        }
    }
    None
}

/// `NAME=value` before a command.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && !name.starts_with('-')
    })
}

/// Every weir command line in the pages' shell and console blocks: (where, arguments).
fn documented_commands() -> Vec<(String, Vec<String>)> {
    let mut found = Vec::new();
    for (path, text) in pages() {
        for b in split(&text).0 {
            let lang = b.info.split_whitespace().next().unwrap_or("");
            let console = match lang {
                "sh" | "bash" | "shell" => false,
                "console" => true,
                _ => continue,
            };
            // Logical lines: `\` at the end continues a line.
            let mut logical: Vec<(usize, String)> = Vec::new();
            let mut continued = false;
            for (i, line) in b.lines.iter().enumerate() {
                let (text, more) = match line.trim_end().strip_suffix('\\') {
                    Some(t) => (t.to_owned(), true),
                    None => (line.clone(), false),
                };
                if continued {
                    let last = logical.last_mut().unwrap();
                    last.1.push(' ');
                    last.1.push_str(&text);
                } else {
                    logical.push((b.line + i, text));
                }
                continued = more;
            }
            for (n, line) in logical {
                let line = if console {
                    match line.strip_prefix("$ ") {
                        Some(l) => l.to_owned(),
                        None => continue, // the command's output
                    }
                } else {
                    line
                };
                for command in shell_commands(&line) {
                    if let Some(args) = weir_args(&command) {
                        found.push((format!("{}:{n}", path.display()), args));
                    }
                }
            }
        }
    }
    found
}

#[test]
fn documented_commands_parse() {
    let app = weir::App::new();
    let commands = documented_commands();
    let mut problems = Vec::new();
    for (at, args) in &commands {
        if let Err(e) = app.check_args(args) {
            problems.push(format!("{at}: `{}` does not parse:\n{e}", args.join(" ")));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    println!("{} documented weir commands parse", commands.len());
    // Every subcommand the docs show is among them: a broken extraction cannot pass.
    let subcommands: std::collections::BTreeSet<&str> =
        commands.iter().filter_map(|(_, a)| a.get(1)).map(String::as_str).collect();
    for expected in ["demo", "run", "put", "replay", "multilang", "leases", "doctor", "import-kcl", "config", "prefix"]
    {
        assert!(subcommands.contains(expected), "no `weir {expected}` found in the docs' code blocks: {subcommands:?}");
    }
}

#[test]
fn the_checks_refuse_what_weir_refuses() {
    let app = weir::App::new();
    let refused = [
        "weir replay --config weir.toml --job x --staus",
        "weir leases seek --config weir.toml --consumer a --to LATEST --al",
        "weir doctor --config weir.toml --observe soon",
        "weir config lint weir.toml",
        "weir archive --config weir.toml",
    ];
    for line in refused {
        let command = shell_commands(line).remove(0);
        assert!(app.check_args(weir_args(&command).unwrap()).is_err(), "{line} was accepted");
    }
    let cases = [
        (
            "PYTHONPATH=.. weir multilang --properties a.properties --print-config > weir.toml   # then: weir run",
            vec!["weir", "multilang", "--properties", "a.properties", "--print-config"],
        ),
        (
            "weir import-kcl --table <KCL lease table> --config weir.toml [--consumer archive] [--dry-run]",
            vec![
                "weir",
                "import-kcl",
                "--table",
                "PLACEHOLDER",
                "--config",
                "weir.toml",
                "--consumer",
                "archive",
                "--dry-run",
            ],
        ),
        (
            r#"weir prefix eval --config w.toml --record '{"a":"b c"}' 2>&1 | head -3"#,
            vec!["weir", "prefix", "eval", "--config", "w.toml", "--record", r#"{"a":"b c"}"#],
        ),
        ("cargo run --release -p weir -- config check x.toml", vec!["weir", "config", "check", "x.toml"]),
    ];
    for (line, expected) in cases {
        let args = shell_commands(line).into_iter().find_map(|c| weir_args(&c));
        assert_eq!(args, Some(expected.into_iter().map(str::to_owned).collect()), "{line}");
    }
    assert_eq!(
        shell_commands("cargo run -p weir-sim --release -- --seed 3").into_iter().find_map(|c| weir_args(&c)),
        None
    );
}

// ---------------------------------------------------------------- links

/// GitHub's anchor for a heading: lower case, punctuation other than `-` and `_` dropped,
/// spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings (a repeated heading gets `-1`, `-2`, ...).
fn anchors(text: &str) -> Vec<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for (_, line) in split(text).1 {
        let Some(heading) = line.strip_prefix('#') else { continue };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let base = slug(&heading.replace('`', ""));
        let n = seen.entry(base.clone()).or_insert(0);
        out.push(if *n == 0 { base.clone() } else { format!("{base}-{n}") });
        *n += 1;
    }
    out
}

/// The targets of a line's markdown links, outside inline code.
fn link_targets(line: &str) -> Vec<String> {
    let mut outside = String::new();
    for (i, part) in line.split('`').enumerate() {
        if i % 2 == 0 {
            outside.push_str(part);
        }
    }
    let mut targets = Vec::new();
    let mut rest = outside.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        targets.push(after[..end].trim().to_owned());
        rest = &after[end..];
    }
    targets
}

/// `a/./b/../c` as `a/c`; `None` when it climbs above the repository's root.
fn normalise(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(p) => out.push(p),
            _ => return None,
        }
    }
    Some(out)
}

#[test]
fn relative_links_point_at_files_and_headings() {
    let pages = pages();
    let mut checked = 0;
    let mut problems = Vec::new();
    for (path, text) in &pages {
        for (n, line) in split(text).1 {
            for target in link_targets(&line) {
                if target.starts_with("http://") || target.starts_with("https://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let at = format!("{}:{n}: ({target})", path.display());
                let (file, fragment) = match target.split_once('#') {
                    Some((f, frag)) => (f, Some(frag)),
                    None => (target.as_str(), None),
                };
                let resolved =
                    if file.is_empty() { Some(path.clone()) } else { normalise(&path.parent().unwrap().join(file)) };
                let Some(resolved) = resolved else {
                    problems.push(format!("{at} points outside the repository"));
                    continue;
                };
                if !root().join(&resolved).exists() {
                    problems.push(format!("{at}: {} does not exist", resolved.display()));
                    continue;
                }
                let Some(fragment) = fragment else { continue };
                let Some((_, target_text)) = pages.iter().find(|(p, _)| *p == resolved) else {
                    problems.push(format!("{at}: a #fragment into a file that is not one of the pages"));
                    continue;
                };
                if !anchors(target_text).iter().any(|a| a == fragment) {
                    problems.push(format!("{at}: {} has no heading #{fragment}", resolved.display()));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    println!("{checked} relative links checked");
    assert!(checked >= 20, "only {checked} relative links found: is the link scan broken?");
}

#[test]
fn anchors_are_githubs() {
    assert_eq!(slug("Taking over a KCL application's leases"), "taking-over-a-kcl-applications-leases");
    assert_eq!(slug("ECS (CloudFormation)"), "ecs-cloudformation");
    assert_eq!(slug(&"Why shards do not move: `weir doctor`".replace('`', "")), "why-shards-do-not-move-weir-doctor");
    assert_eq!(anchors("# A\n## B\n```\n# not a heading\n```\n## B\n"), ["a", "b", "b-1"]);
}

//! jq filters (jaq, JQ-1.6 semantics) compiled once, with errors that say where in the
//! expression they are.

use jaq_core::load::{Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Vars, data, unwrap_valr};
use jaq_json::Val;

/// A compiled filter.
pub struct Filter {
    source: String,
    jq: jaq_core::Filter<data::JustLut<Val>>,
}

impl std::fmt::Debug for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Filter({:?})", self.source)
    }
}

/// A filter that does not compile.
#[derive(Debug, Clone, thiserror::Error)]
#[error("jq expression {expression:?}: {message}")]
pub struct FilterError {
    /// The expression.
    pub expression: String,
    /// What is wrong, and where (character offset).
    pub message: String,
}

/// Offset of `part` inside `whole`, when it is a slice of it.
fn offset(whole: &str, part: &str) -> Option<usize> {
    let (w, p) = (whole.as_ptr() as usize, part.as_ptr() as usize);
    (p >= w && p <= w + whole.len()).then(|| whole[..p - w].chars().count())
}

impl Filter {
    /// Compiles `source`.
    pub fn compile(source: &str) -> Result<Self, FilterError> {
        let err = |message: String| FilterError { expression: source.to_owned(), message };
        let defs = jaq_core::defs().chain(jaq_std::defs()).chain(jaq_json::defs());
        let funs = jaq_core::funs().chain(jaq_std::funs()).chain(jaq_json::funs());
        let loader = Loader::new(defs);
        let arena = Arena::default();
        let modules = loader.load(&arena, File { code: source, path: () }).map_err(|errors| {
            let mut parts = Vec::new();
            for (_, e) in errors {
                match e {
                    jaq_core::load::Error::Lex(v) => {
                        for (expect, rest) in v {
                            let at = offset(source, rest).unwrap_or(0);
                            parts.push(format!("at character {at}: expected {}", expect.as_str()));
                        }
                    }
                    jaq_core::load::Error::Parse(v) => {
                        for (expect, found) in v {
                            let at = offset(source, found).unwrap_or(source.chars().count());
                            let found = if found.is_empty() { "the end".to_owned() } else { format!("{found:?}") };
                            parts.push(format!("at character {at}: expected {}, found {found}", expect.as_str()));
                        }
                    }
                    jaq_core::load::Error::Io(v) => parts.extend(v.into_iter().map(|(_, m)| m)),
                }
            }
            err(parts.join("; "))
        })?;
        let jq = Compiler::default().with_funs(funs).compile(modules).map_err(|errors| {
            let parts: Vec<String> = errors
                .into_iter()
                .flat_map(|(_, v)| v)
                .map(|(name, undefined)| {
                    let at = offset(source, name).unwrap_or(0);
                    format!("at character {at}: undefined {undefined:?} {name:?}")
                })
                .collect();
            err(parts.join("; "))
        })?;
        Ok(Self { source: source.to_owned(), jq })
    }

    /// The expression.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The filter's first output, or an error message.
    pub fn first(&self, input: Val) -> Result<Option<Val>, String> {
        self.first_two(input).map(|(first, _)| first)
    }

    /// The filter's only output; no output or more than one is an error.
    pub fn single(&self, input: Val) -> Result<Val, String> {
        match self.first_two(input)? {
            (None, _) => Err("no output".into()),
            (Some(_), true) => Err("more than one output".into()),
            (Some(v), false) => Ok(v),
        }
    }

    /// The first output and whether there is another.
    fn first_two(&self, input: Val) -> Result<(Option<Val>, bool), String> {
        let ctx = Ctx::<data::JustLut<Val>>::new(&self.jq.lut, Vars::new([]));
        let mut out = self.jq.id.run((ctx, input)).map(unwrap_valr);
        match out.next() {
            None => Ok((None, false)),
            Some(Ok(v)) => Ok((Some(v), out.next().is_some())),
            Some(Err(e)) => Err(format!("{e:?}")),
        }
    }
}

/// Deepest nesting of arrays and objects [`parse`] accepts: the limit of jq 1.6's
/// parser (`MAX_PARSING_DEPTH`), the engine Firehose names `JQ-1.6`. jaq's reader
/// recurses once per level and has no limit of its own: a record of 1 MiB of `[`
/// overflowed the thread's stack and aborted the process.
pub const MAX_JSON_DEPTH: usize = 256;

/// Why bytes are not a JSON value for jq.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    /// Not JSON (or not UTF-8).
    #[error("not valid JSON")]
    NotJson,
    /// Arrays and objects nested deeper than [`MAX_JSON_DEPTH`].
    #[error("nested deeper than {MAX_JSON_DEPTH} levels")]
    TooDeep,
}

/// Parses one JSON value for jq: every caller of jaq's reader on untrusted bytes goes
/// through here, so hostile nesting is an error, never a stack overflow.
pub fn parse(data: &[u8]) -> Result<Val, JsonError> {
    if nesting_exceeds(data, MAX_JSON_DEPTH) {
        return Err(JsonError::TooDeep);
    }
    jaq_json::read::parse_single(data).map_err(|_| JsonError::NotJson)
}

/// Whether brackets outside strings nest deeper than `limit` anywhere in `data`. Only
/// an upper bound for valid JSON matters: invalid input that passes is refused by
/// the parser, which then never recurses past `limit`.
fn nesting_exceeds(data: &[u8], limit: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in data {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// Whether a jq value is truthy (everything but `false` and `null`).
pub fn truthy(v: &Val) -> bool {
    !matches!(v, Val::Null | Val::Bool(false))
}

/// A jq value as a group-key part: strings as they are, anything else as JSON text.
pub fn key_text(v: &Val) -> String {
    match v {
        Val::TStr(b) | Val::BStr(b) => String::from_utf8_lossy(b).into_owned(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_say_where() {
        let e = Filter::compile(".tenantId | (").unwrap_err();
        assert!(e.message.contains("at character"), "{e}");
        let e = Filter::compile(".a | nosuchfn").unwrap_err();
        assert!(e.message.contains("at character 5"), "{e}");
    }

    #[test]
    fn nesting_is_bounded_without_recursion() {
        let nest = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
        assert!(parse(nest(MAX_JSON_DEPTH).as_bytes()).is_ok());
        assert_eq!(parse(nest(MAX_JSON_DEPTH + 1).as_bytes()).unwrap_err(), JsonError::TooDeep);
        // A megabyte of brackets: refused, not a stack overflow.
        assert_eq!(parse(nest(500_000).as_bytes()).unwrap_err(), JsonError::TooDeep);
        assert_eq!(parse("{\"a\":".repeat(100_000).as_bytes()).unwrap_err(), JsonError::TooDeep);
        // Brackets inside strings do not count, escaped quotes do not end a string.
        let text = format!(r#"{{"s":"{}\"{}","n":[1]}}"#, "[".repeat(1000), "{".repeat(1000));
        assert!(parse(text.as_bytes()).is_ok());
        assert_eq!(parse(b"{\"a\":").unwrap_err(), JsonError::NotJson);
    }

    #[test]
    fn runs() {
        let f = Filter::compile(".success == false").unwrap();
        let v = jaq_json::read::parse_single(br#"{"success":false}"#).unwrap();
        assert!(truthy(&f.first(v).unwrap().unwrap()));
    }
}

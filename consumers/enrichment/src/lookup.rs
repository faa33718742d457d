//! Tenant metadata (plan, region, owner, ...) from a JSON or CSV object, read through
//! the `ObjectSink` port (a local directory or S3) and refreshed on an interval.
//!
//! JSON: an object keyed by id (`{"t-001": {"plan": "pro"}}`) or an array of objects
//! with an `id` field. CSV: a header row; the first column is the id.

use std::collections::HashMap;

use serde_json::{Map, Value};

/// Lookup rows by id.
pub type Table = HashMap<String, Map<String, Value>>;

/// Parses a lookup object; `name` decides the format (`.csv`, else JSON).
pub fn parse(name: &str, body: &[u8]) -> Result<Table, String> {
    if name.ends_with(".csv") {
        return parse_csv(body);
    }
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("{name}: not JSON: {e}"))?;
    let mut out = Table::new();
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                match v {
                    Value::Object(row) => {
                        out.insert(k, row);
                    }
                    _ => return Err(format!("{name}: {k:?} is not an object")),
                }
            }
        }
        Value::Array(rows) => {
            for (i, row) in rows.into_iter().enumerate() {
                let Value::Object(row) = row else { return Err(format!("{name}: row {i} is not an object")) };
                let id = match row.get("id") {
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                    None => return Err(format!("{name}: row {i} has no \"id\"")),
                };
                out.insert(id, row);
            }
        }
        _ => return Err(format!("{name}: expected an object or an array")),
    }
    Ok(out)
}

fn parse_csv(body: &[u8]) -> Result<Table, String> {
    let text = std::str::from_utf8(body).map_err(|_| "CSV is not UTF-8".to_owned())?;
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<String> = lines.next().ok_or("CSV is empty")?.split(',').map(|h| h.trim().to_owned()).collect();
    let mut out = Table::new();
    for (n, line) in lines.enumerate() {
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        if cells.len() != header.len() {
            return Err(format!("CSV line {}: {} cells for {} columns", n + 2, cells.len(), header.len()));
        }
        let row: Map<String, Value> = header
            .iter()
            .skip(1)
            .zip(cells.iter().skip(1))
            .map(|(h, c)| (h.clone(), Value::String((*c).to_owned())))
            .collect();
        out.insert(cells[0].to_owned(), row);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_csv() {
        let t = parse("t.json", br#"{"t-1":{"plan":"pro"}}"#).unwrap();
        assert_eq!(t["t-1"]["plan"], "pro");
        let t = parse("t.json", br#"[{"id":"t-2","region":"eu"}]"#).unwrap();
        assert_eq!(t["t-2"]["region"], "eu");
        let t = parse("t.csv", b"id,plan,owner\nt-3,free,ann\n").unwrap();
        assert_eq!(t["t-3"]["owner"], "ann");
        assert!(parse("t.csv", b"id,plan\nt-4\n").unwrap_err().contains("line 2"));
        assert!(parse("t.json", b"[1]").is_err());
    }
}

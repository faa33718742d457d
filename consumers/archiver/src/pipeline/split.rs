//! `RecordDeAggregation`: one stream record holding several JSON objects back to back,
//! or several records separated by a delimiter, split into parts before the transform.

use bytes::Bytes;

use weir_firehose::SubRecords;

/// Why a record cannot be split (it then goes to the error output whole).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// `RecordDeAggregation` of type JSON, and the record is not a sequence of JSON values.
    #[error("not a sequence of JSON values: {0}")]
    NotJsonSequence(String),
    /// `Decompression` / `CloudWatchLogProcessing` could not unpack the record.
    #[error(transparent)]
    Unpack(#[from] super::cloudwatch_logs::UnpackError),
}

/// Splits `data` into parts.
pub fn split(data: &Bytes, how: &SubRecords) -> Result<Vec<Bytes>, SplitError> {
    match how {
        SubRecords::Json => {
            let mut out = Vec::new();
            let mut stream = serde_json::Deserializer::from_slice(data).into_iter::<serde::de::IgnoredAny>();
            let mut start = 0usize;
            while let Some(item) = stream.next() {
                item.map_err(|e| SplitError::NotJsonSequence(e.to_string()))?;
                let end = stream.byte_offset();
                let piece = data.slice(start..end);
                let trimmed = trim(&piece);
                if !trimmed.is_empty() {
                    out.push(trimmed);
                }
                start = end;
            }
            Ok(out)
        }
        SubRecords::Delimited(delim) if delim.is_empty() => Ok(vec![data.clone()]),
        SubRecords::Delimited(delim) => {
            let mut out = Vec::new();
            let mut start = 0usize;
            let mut i = 0usize;
            while i + delim.len() <= data.len() {
                if &data[i..i + delim.len()] == delim.as_slice() {
                    if i > start {
                        out.push(data.slice(start..i));
                    }
                    i += delim.len();
                    start = i;
                } else {
                    i += 1;
                }
            }
            if start < data.len() {
                out.push(data.slice(start..));
            }
            Ok(out)
        }
    }
}

fn trim(b: &Bytes) -> Bytes {
    let s = b.iter().position(|c| !c.is_ascii_whitespace()).unwrap_or(b.len());
    let e = b.iter().rposition(|c| !c.is_ascii_whitespace()).map_or(s, |e| e + 1);
    b.slice(s..e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_objects_back_to_back() {
        let data = Bytes::from_static(
            br#"{"a":1}{"a":2} {"a":"}{"}
"#,
        );
        let parts = split(&data, &SubRecords::Json).unwrap();
        assert_eq!(
            parts,
            vec![
                Bytes::from_static(br#"{"a":1}"#),
                Bytes::from_static(br#"{"a":2}"#),
                Bytes::from_static(br#"{"a":"}{"}"#)
            ]
        );
        assert!(split(&Bytes::from_static(b"{\"a\":1}{oops"), &SubRecords::Json).is_err());
    }

    #[test]
    fn delimited() {
        let data = Bytes::from_static(b"a||b||||c||");
        let parts = split(&data, &SubRecords::Delimited(b"||".to_vec())).unwrap();
        assert_eq!(parts, vec![Bytes::from_static(b"a"), Bytes::from_static(b"b"), Bytes::from_static(b"c")]);
    }
}

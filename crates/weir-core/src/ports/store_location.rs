//! Where an object store is: a local directory or an S3 bucket.

use std::path::{Path, PathBuf};

/// An object store's location. Config sections name it with one of two fields,
/// `directory` or `bucket`; [`StoreLocation::from_fields`] is the one place that rule
/// is checked, and everything past the config takes this type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// A local directory (weir-local's filesystem sink).
    Directory(PathBuf),
    /// An S3 bucket.
    Bucket(String),
}

/// A section named both `directory` and `bucket`, or neither.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("needs exactly one of `directory` and `bucket`")]
pub struct StoreFieldsError;

impl StoreLocation {
    /// The location a section's `directory` and `bucket` fields name.
    pub fn from_fields(directory: Option<&Path>, bucket: Option<&str>) -> Result<Self, StoreFieldsError> {
        match (directory, bucket) {
            (Some(dir), None) => Ok(StoreLocation::Directory(dir.to_path_buf())),
            (None, Some(bucket)) if !bucket.is_empty() => Ok(StoreLocation::Bucket(bucket.to_owned())),
            _ => Err(StoreFieldsError),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_one_of_the_two() {
        let dir = Path::new("out");
        assert_eq!(StoreLocation::from_fields(Some(dir), None), Ok(StoreLocation::Directory(dir.into())));
        assert_eq!(StoreLocation::from_fields(None, Some("b")), Ok(StoreLocation::Bucket("b".into())));
        assert_eq!(StoreLocation::from_fields(Some(dir), Some("b")), Err(StoreFieldsError));
        assert_eq!(StoreLocation::from_fields(None, None), Err(StoreFieldsError));
        assert_eq!(StoreLocation::from_fields(None, Some("")), Err(StoreFieldsError));
    }
}

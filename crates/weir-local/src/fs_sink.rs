//! A local directory as a create-only object store.
//!
//! A put writes the body to a temporary file under `<root>/.weir-tmp/`, syncs it, then
//! hard-links it to the final path. `link` fails if the target exists, which makes the
//! put atomic (readers never see a partial object) and create-only (an existing object
//! is never replaced), like S3 with `If-None-Match: *`.

use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use bytes::Bytes;
use weir_core::ports::{ObjectMeta, ObjectSink, PutOptions, PutOutcome, SinkError, validate_key};

const TMP_DIR: &str = ".weir-tmp";

/// Object store in a local directory. Keys map to relative paths.
#[derive(Debug, Clone)]
pub struct FsObjectSink {
    root: PathBuf,
}

fn io_err(what: &str, e: std::io::Error) -> SinkError {
    SinkError::Store { message: format!("{what}: {e}"), retryable: true, source: Some(Box::new(e)) }
}

impl FsObjectSink {
    /// A store rooted at `root` (created if missing).
    pub fn new(root: impl Into<PathBuf>) -> Result<Self, SinkError> {
        let root = root.into();
        std::fs::create_dir_all(root.join(TMP_DIR)).map_err(|e| io_err(&format!("create {}", root.display()), e))?;
        Ok(Self { root })
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn put_blocking(root: &Path, key: &str, body: &[u8]) -> Result<PutOutcome, SinkError> {
        let target = root.join(key);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io_err("create directories", e))?;
        }
        let tmp_dir = root.join(TMP_DIR);
        let mut tmp =
            tempfile::Builder::new().prefix("put-").tempfile_in(&tmp_dir).map_err(|e| io_err("create temp file", e))?;
        tmp.write_all(body).map_err(|e| io_err("write temp file", e))?;
        tmp.as_file().sync_all().map_err(|e| io_err("sync temp file", e))?;
        let outcome = match std::fs::hard_link(tmp.path(), &target) {
            Ok(()) => PutOutcome::Created,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => PutOutcome::AlreadyExists,
            Err(e) => return Err(io_err("link object", e)),
        };
        if outcome == PutOutcome::Created
            && let Some(parent) = target.parent()
            && let Ok(dir) = std::fs::File::open(parent)
        {
            // Make the new directory entry durable.
            let _ = dir.sync_all();
        }
        Ok(outcome)
    }

    fn list_blocking(root: &Path, prefix: &str) -> Result<Vec<ObjectMeta>, SinkError> {
        // Walk only the deepest directory the prefix names.
        let dir_part = match prefix.rfind('/') {
            Some(i) => &prefix[..i],
            None => "",
        };
        let start = root.join(dir_part);
        let mut out = Vec::new();
        let mut stack = vec![start];
        while let Some(dir) = stack.pop() {
            let entries = match std::fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err("read directory", e)),
            };
            for entry in entries {
                let entry = entry.map_err(|e| io_err("read directory entry", e))?;
                let path = entry.path();
                let Ok(rel) = path.strip_prefix(root) else {
                    continue;
                };
                let Some(rel) = rel.to_str() else { continue };
                if rel == TMP_DIR {
                    continue;
                }
                let kind = entry.file_type().map_err(|e| io_err("file type", e))?;
                if kind.is_dir() {
                    stack.push(path);
                } else if rel.starts_with(prefix) {
                    let size = entry.metadata().map_err(|e| io_err("metadata", e))?.len();
                    out.push(ObjectMeta { key: rel.to_owned(), size });
                }
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }
}

#[async_trait]
impl ObjectSink for FsObjectSink {
    async fn put_if_absent(&self, key: &str, body: Bytes, _options: &PutOptions) -> Result<PutOutcome, SinkError> {
        validate_key(key)?;
        if key.split('/').next() == Some(TMP_DIR) {
            return Err(SinkError::InvalidKey { key: key.to_owned(), reason: "reserved prefix" });
        }
        let (root, key) = (self.root.clone(), key.to_owned());
        tokio::task::spawn_blocking(move || Self::put_blocking(&root, &key, &body))
            .await
            .map_err(|e| io_err("put task", std::io::Error::other(e)))?
    }

    async fn get(&self, key: &str) -> Result<Option<Bytes>, SinkError> {
        validate_key(key)?;
        match tokio::fs::read(self.root.join(key)).await {
            Ok(b) => Ok(Some(Bytes::from(b))),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("read object", e)),
        }
    }

    async fn stat(&self, key: &str) -> Result<Option<ObjectMeta>, SinkError> {
        validate_key(key)?;
        match tokio::fs::metadata(self.root.join(key)).await {
            Ok(m) if m.is_file() => Ok(Some(ObjectMeta { key: key.to_owned(), size: m.len() })),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("stat object", e)),
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, SinkError> {
        let (root, prefix) = (self.root.clone(), prefix.to_owned());
        tokio::task::spawn_blocking(move || Self::list_blocking(&root, &prefix))
            .await
            .map_err(|e| io_err("list task", std::io::Error::other(e)))?
    }

    async fn delete(&self, key: &str) -> Result<(), SinkError> {
        validate_key(key)?;
        if key.split('/').next() == Some(TMP_DIR) {
            return Err(SinkError::InvalidKey { key: key.to_owned(), reason: "reserved prefix" });
        }
        match tokio::fs::remove_file(self.root.join(key)).await {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err("delete object", e)),
        }
        // Directories the key leaves empty go too (a failure means "not empty": stop).
        let mut dir = std::path::Path::new(key).parent();
        while let Some(d) = dir.filter(|d| !d.as_os_str().is_empty()) {
            if tokio::fs::remove_dir(self.root.join(d)).await.is_err() {
                break;
            }
            dir = d.parent();
        }
        Ok(())
    }

    fn location(&self) -> String {
        self.root.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn passes_object_sink_conformance() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        weir_testkit::conformance::object_sink_suite(|| {
            let s = FsObjectSink::new(&root).unwrap();
            async move { Arc::new(s) as Arc<dyn ObjectSink> }
        })
        .await;
        // No temporary files are left behind.
        let leftovers = std::fs::read_dir(root.join(TMP_DIR)).unwrap().count();
        assert_eq!(leftovers, 0);
    }

    #[tokio::test]
    async fn deleting_the_last_object_of_a_directory_removes_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let s = FsObjectSink::new(dir.path()).unwrap();
        let o = PutOptions::default();
        s.put_if_absent("_weir/intents/a/s/1.manifest", Bytes::from_static(b"x"), &o).await.unwrap();
        s.put_if_absent("_weir/other", Bytes::from_static(b"y"), &o).await.unwrap();
        s.delete("_weir/intents/a/s/1.manifest").await.unwrap();
        assert!(!dir.path().join("_weir/intents").exists(), "emptied directories are removed");
        assert!(dir.path().join("_weir/other").exists(), "a directory with objects stays");
    }
}

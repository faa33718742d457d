//! A local directory as a create-only object store.
//!
//! A put writes the body to a temporary file under `<root>/.weir-tmp/`, syncs it, then
//! hard-links it to the final path. `link` fails if the target exists, which makes the
//! put atomic (readers never see a partial object) and create-only (an existing object
//! is never replaced), like S3 with `If-None-Match: *`. It answers only once the
//! object's directory entry, and those of the directories it created, are synced (and
//! the root's, when opening the store created it): a stored object survives a crash
//! of the machine, so a checkpoint that counts on it never passes a record that is
//! lost.

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

/// Makes `dir`'s entries durable (a relative path's empty parent is the working
/// directory).
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    std::fs::File::open(dir)?.sync_all()
}

/// `dir` and its ancestors that do not exist yet, the deepest first, stopping at
/// `above` (never included) or at the first that exists.
fn missing_dirs(dir: &Path, above: Option<&Path>) -> Vec<PathBuf> {
    let mut missing = Vec::new();
    let mut next = Some(dir);
    while let Some(d) = next.filter(|d| Some(*d) != above && !d.as_os_str().is_empty() && !d.exists()) {
        missing.push(d.to_path_buf());
        next = d.parent();
    }
    missing
}

/// Creates `dir` and its missing ancestors below `above`; those it created, the
/// deepest first.
fn create_dirs(dir: &Path, above: Option<&Path>) -> std::io::Result<Vec<PathBuf>> {
    let created = missing_dirs(dir, above);
    std::fs::create_dir_all(dir)?;
    Ok(created)
}

fn io_err(what: &str, e: std::io::Error) -> SinkError {
    SinkError::Store { message: format!("{what}: {e}"), retryable: true, source: Some(Box::new(e)) }
}

impl FsObjectSink {
    /// A store rooted at `root` (created if missing, with the entries of the
    /// directories it creates synced, as a put syncs those it creates).
    pub fn new(root: impl Into<PathBuf>) -> Result<Self, SinkError> {
        Self::new_with(root.into(), &mut sync_dir)
    }

    fn new_with(root: PathBuf, sync_dir: &mut dyn FnMut(&Path) -> std::io::Result<()>) -> Result<Self, SinkError> {
        let created =
            create_dirs(&root.join(TMP_DIR), None).map_err(|e| io_err(&format!("create {}", root.display()), e))?;
        for dir in created.iter().filter_map(|d| d.parent()) {
            sync_dir(dir).map_err(|e| io_err(&format!("sync directory {}", dir.display()), e))?;
        }
        Ok(Self { root })
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn put_blocking(root: &Path, key: &str, body: &[u8]) -> Result<PutOutcome, SinkError> {
        Self::put_with(root, key, body, &mut sync_dir)
    }

    /// The put, with `sync_dir` making a directory's entries durable. An object is
    /// durable once its bytes are synced (before it is linked), the directory holding
    /// it is synced (its entry), and so is the parent of every directory the put
    /// created (theirs), so a crash of the machine cannot drop an object the caller
    /// was told is stored. A put that finds the object there syncs the same
    /// directories: a retry after a failed sync completes the first put's durability.
    fn put_with(
        root: &Path,
        key: &str,
        body: &[u8],
        sync_dir: &mut dyn FnMut(&Path) -> std::io::Result<()>,
    ) -> Result<PutOutcome, SinkError> {
        let target = root.join(key);
        // The key's directories, those created here listed, the deepest first.
        let created = match target.parent() {
            Some(parent) => create_dirs(parent, Some(root)).map_err(|e| io_err("create directories", e))?,
            None => Vec::new(),
        };
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
        // The object's entry, then each created directory's entry in its parent.
        let parents = target.parent().into_iter().chain(created.iter().filter_map(|d| d.parent()));
        for dir in parents {
            sync_dir(dir).map_err(|e| io_err(&format!("sync directory {}", dir.display()), e))?;
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

    #[test]
    fn a_put_syncs_the_object_s_directory_and_the_parent_of_each_it_created() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        FsObjectSink::new(&root).unwrap();
        std::fs::create_dir_all(root.join("tool-events/tenant=a")).unwrap();
        // A put's outcome and the directories it synced, relative to the root.
        let put = |key: &str| {
            let mut synced = Vec::new();
            let mut record = |d: &Path| {
                synced.push(d.strip_prefix(&root).unwrap().display().to_string());
                Ok(())
            };
            let outcome = FsObjectSink::put_with(&root, key, b"x", &mut record).unwrap();
            (outcome, synced)
        };
        let key = "tool-events/tenant=a/tool=b/day=1/o.gz";
        // day=1 holds the object; tool=b and day=1 were created, in tenant=a and tool=b.
        let (outcome, synced) = put(key);
        assert_eq!(outcome, PutOutcome::Created);
        assert_eq!(
            synced,
            ["tool-events/tenant=a/tool=b/day=1", "tool-events/tenant=a/tool=b", "tool-events/tenant=a"]
        );
        // Found there (a retry): its directory is synced again.
        assert_eq!(put(key), (PutOutcome::AlreadyExists, vec!["tool-events/tenant=a/tool=b/day=1".to_owned()]));
        // A top-level key: the root is its directory.
        assert_eq!(put("top"), (PutOutcome::Created, vec![String::new()]));
    }

    #[test]
    fn a_new_store_syncs_the_parent_of_each_directory_it_created() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path();
        let mut synced = Vec::new();
        let mut record = |d: &Path| {
            synced.push(d.strip_prefix(base).unwrap().display().to_string());
            Ok(())
        };
        FsObjectSink::new_with(base.join("archive/weir"), &mut record).unwrap();
        // .weir-tmp, weir and archive were created, in weir, archive and the base.
        assert_eq!(synced, ["archive/weir", "archive", ""]);
        // Opened again: nothing created, nothing to sync.
        let mut none = |d: &Path| panic!("synced {}", d.display());
        FsObjectSink::new_with(base.join("archive/weir"), &mut none).unwrap();
        // A failed sync fails the opening.
        let mut failing = |_: &Path| Err(std::io::Error::other("EIO"));
        let err = FsObjectSink::new_with(base.join("other"), &mut failing).unwrap_err();
        assert!(err.to_string().contains("sync directory"), "{err}");
    }

    #[test]
    fn a_new_store_at_a_relative_path_syncs_the_working_directory() {
        // The empty parent of a relative root is synced as ".", not refused.
        assert!(sync_dir(Path::new("")).is_ok());
        assert_eq!(
            missing_dirs(Path::new("no-such-dir/x"), None),
            [Path::new("no-such-dir/x"), Path::new("no-such-dir")]
        );
    }

    #[test]
    fn a_failed_directory_sync_fails_the_put() {
        let dir = tempfile::tempdir().unwrap();
        FsObjectSink::new(dir.path()).unwrap();
        let mut failing = |_: &Path| Err(std::io::Error::other("EIO"));
        let err = FsObjectSink::put_with(dir.path(), "a/b", b"x", &mut failing).unwrap_err();
        assert!(err.is_retryable(), "{err}");
        assert!(err.to_string().contains("sync directory"), "{err}");
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

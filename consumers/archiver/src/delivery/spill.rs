//! Local spill: compressed bytes of open buffers parked on disk so that a partition
//! pushed out of memory keeps growing until its size or interval hint instead of being
//! sealed early into a small object.
//!
//! The store is a few append-only files in `spill_directory`, each at most
//! [`FILE_LIMIT`] bytes. A spilled piece is written once, read once when its buffer is
//! sealed, and then released; a file is deleted when nothing in it is live and it is
//! not the one being appended to, so the disk holds about what the open buffers spilled
//! (at most one buffer interval of compressed data) plus one file.
//!
//! Spilled bytes are never acknowledged: the records are acknowledged only once the
//! object holding them is in the object store, exactly as for buffers in memory. A
//! crash loses the spill files' content and nothing else (the stream still holds the
//! records). Each file is locked (`flock`) while its archiver lives; at start, files of
//! the same name pattern that no live process locks are deleted as leftovers of a
//! crash.
//!
//! The I/O is synchronous: spilling happens inside a buffer relief, writes go to the
//! page cache, and a read happens once per sealed object.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Size at which a spill file stops taking new pieces.
pub const FILE_LIMIT: u64 = 256 << 20;

const FILE_PREFIX: &str = "weir-spill-";

/// A spill failure.
#[derive(Debug, thiserror::Error)]
pub enum SpillError {
    /// The directory or a file could not be created, written or read.
    #[error("spill {what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// A piece of a buffer's bytes on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpillRef {
    file: u64,
    offset: u64,
    len: u64,
}

struct SpillFile {
    file: File,
    path: PathBuf,
    len: u64,
    live: u64,
}

/// The spill files of one archiver.
pub struct Spill {
    dir: PathBuf,
    name: String,
    files: BTreeMap<u64, SpillFile>,
    active: Option<u64>,
    next: u64,
    live: u64,
    fail_writes: bool,
    file_limit: u64,
}

impl std::fmt::Debug for Spill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spill").field("dir", &self.dir).field("live", &self.live).finish()
    }
}

impl Spill {
    /// Spill files of consumer `name` in `dir` (created if missing). Leftover files
    /// that no live process locks are deleted.
    pub fn open(dir: &Path, name: &str) -> Result<Self, SpillError> {
        let io = |what: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| SpillError::Io { what, path, source }
        };
        std::fs::create_dir_all(dir).map_err(io("create directory", dir))?;
        for entry in std::fs::read_dir(dir).map_err(io("list directory", dir))?.flatten() {
            let path = entry.path();
            let leftover = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(FILE_PREFIX));
            if leftover
                && let Ok(f) = File::open(&path)
                && f.try_lock().is_ok()
            {
                tracing::info!(path = %path.display(), "deleting a spill file left by a crash");
                let _ = std::fs::remove_file(&path);
            }
        }
        let name: String = name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
        Ok(Self {
            dir: dir.to_path_buf(),
            name,
            files: BTreeMap::new(),
            active: None,
            next: 0,
            live: 0,
            fail_writes: false,
            file_limit: FILE_LIMIT,
        })
    }

    /// Bytes on disk that open buffers still need.
    #[cfg(test)]
    pub fn live_bytes(&self) -> u64 {
        self.live
    }

    /// Spill files that exist now.
    #[cfg(test)]
    pub fn files(&self) -> usize {
        self.files.len()
    }

    /// Makes every later write fail (tests of the fallback when the disk is full).
    #[cfg(test)]
    pub fn fail_writes(&mut self, fail: bool) {
        self.fail_writes = fail;
    }

    /// Writes `bytes` as one piece.
    pub fn write(&mut self, bytes: &[u8]) -> Result<SpillRef, SpillError> {
        let id = self.active_file(bytes.len() as u64)?;
        let f = self.files.get_mut(&id).unwrap_or_else(|| unreachable!("active file exists"));
        if self.fail_writes {
            let source = std::io::Error::new(std::io::ErrorKind::StorageFull, "no space left on device (injected)");
            return Err(SpillError::Io { what: "write", path: f.path.clone(), source });
        }
        f.file.write_all_at(bytes, f.len).map_err(|source| SpillError::Io {
            what: "write",
            path: f.path.clone(),
            source,
        })?;
        let r = SpillRef { file: id, offset: f.len, len: bytes.len() as u64 };
        f.len += r.len;
        f.live += r.len;
        self.live += r.len;
        metrics::gauge!(crate::metrics::SPILLED_BYTES, crate::metrics::ARCHIVER => self.name.clone())
            .set(self.live as f64);
        Ok(r)
    }

    /// Whether a write works now: one byte written and released.
    pub fn probe(&mut self) -> Result<(), SpillError> {
        let r = self.write(&[0])?;
        self.release(&r);
        Ok(())
    }

    /// The directory, for messages.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends the piece's bytes to `out`.
    pub fn read(&self, r: &SpillRef, out: &mut Vec<u8>) -> Result<(), SpillError> {
        let f = self.files.get(&r.file).ok_or_else(|| SpillError::Io {
            what: "read",
            path: self.dir.clone(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "spill file released"),
        })?;
        let start = out.len();
        out.resize(start + r.len as usize, 0);
        f.file.read_exact_at(&mut out[start..], r.offset).map_err(|source| SpillError::Io {
            what: "read",
            path: f.path.clone(),
            source,
        })
    }

    /// The piece is no longer needed; a file with nothing live is deleted unless it
    /// is the one being appended to.
    pub fn release(&mut self, r: &SpillRef) {
        let Some(f) = self.files.get_mut(&r.file) else { return };
        f.live = f.live.saturating_sub(r.len);
        self.live = self.live.saturating_sub(r.len);
        metrics::gauge!(crate::metrics::SPILLED_BYTES, crate::metrics::ARCHIVER => self.name.clone())
            .set(self.live as f64);
        if f.live == 0 && self.active != Some(r.file) {
            self.delete(r.file);
        }
    }

    fn delete(&mut self, id: u64) {
        if let Some(f) = self.files.remove(&id)
            && let Err(e) = std::fs::remove_file(&f.path)
        {
            tracing::warn!(path = %f.path.display(), error = %e, "cannot delete a spill file");
        }
    }

    /// The file to append `len` bytes to (a new one past [`FILE_LIMIT`]).
    fn active_file(&mut self, len: u64) -> Result<u64, SpillError> {
        if let Some(id) = self.active
            && let Some(f) = self.files.get(&id)
        {
            if f.len == 0 || f.len + len <= self.file_limit {
                return Ok(id);
            }
            self.active = None;
            if f.live == 0 {
                self.delete(id);
            }
        }
        let id = self.next;
        self.next += 1;
        let unique: u64 = rand::random();
        let path = self.dir.join(format!("{FILE_PREFIX}{}-{unique:016x}-{id}.bin", self.name));
        let io = |what| {
            let path = path.clone();
            move |source| SpillError::Io { what, path, source }
        };
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(&path).map_err(io("create"))?;
        file.try_lock().map_err(|e| SpillError::Io { what: "lock", path: path.clone(), source: e.into() })?;
        self.files.insert(id, SpillFile { file, path, len: 0, live: 0 });
        self.active = Some(id);
        Ok(id)
    }
}

impl Drop for Spill {
    fn drop(&mut self) {
        let ids: Vec<u64> = self.files.keys().copied().collect();
        for id in ids {
            self.delete(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_round_trip_and_files_go_when_nothing_is_live() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spill::open(dir.path(), "archive").unwrap();
        s.file_limit = 1000;
        let a = s.write(b"hello").unwrap();
        let big = vec![7u8; 993];
        let b = s.write(&big).unwrap();
        let c = s.write(b"world").unwrap(); // past the limit: a new file
        assert_eq!(s.files(), 2);
        let mut out = Vec::new();
        s.read(&a, &mut out).unwrap();
        s.read(&c, &mut out).unwrap();
        assert_eq!(out, b"helloworld");
        assert_eq!(s.live_bytes(), 10 + big.len() as u64);
        s.release(&a);
        assert_eq!(s.files(), 2, "b is still live in the first file");
        s.release(&b);
        assert_eq!(s.files(), 1, "the first file had nothing live left");
        s.release(&c);
        assert_eq!(s.files(), 1, "the file being appended to stays");
        assert_eq!(s.live_bytes(), 0);
        drop(s);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing left behind");
    }

    #[test]
    fn leftovers_of_a_crash_are_deleted_and_live_files_are_not() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("weir-spill-archive-dead-0.bin"), b"old").unwrap();
        std::fs::write(dir.path().join("unrelated.txt"), b"keep").unwrap();
        let mut live = Spill::open(dir.path(), "archive").unwrap();
        live.write(b"mine").unwrap();
        assert!(!dir.path().join("weir-spill-archive-dead-0.bin").exists(), "unlocked leftover deleted");
        // A second archiver in the same directory leaves the first one's locked file.
        let other = Spill::open(dir.path(), "archive").unwrap();
        assert_eq!(live.files(), 1);
        let names: Vec<String> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(names.contains(&"unrelated.txt".to_owned()));
        drop(other);
        let mut out = Vec::new();
        live.read(&SpillRef { file: 0, offset: 0, len: 4 }, &mut out).unwrap();
        assert_eq!(out, b"mine");
    }

    #[test]
    fn a_directory_that_cannot_exist_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a-file");
        std::fs::write(&file, b"x").unwrap();
        let e = Spill::open(&file.join("spill"), "archive").unwrap_err();
        assert!(e.to_string().contains("a-file/spill"), "{e}");
    }
}

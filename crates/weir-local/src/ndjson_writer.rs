//! [`StreamWriter`] into one NDJSON file (single-machine use): records are appended in
//! order, one per line, and the file is synced before `write` returns.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use async_trait::async_trait;
use weir_core::ports::{OutRecord, StreamWriter, WriteError};

/// Appends to a file.
pub struct NdjsonFileWriter {
    path: PathBuf,
    file: Mutex<std::fs::File>,
}

impl NdjsonFileWriter {
    /// Opens (creating directories and the file) `path` for appending.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        if let Some(dir) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self { path: path.to_path_buf(), file: Mutex::new(file) })
    }
}

#[async_trait]
impl StreamWriter for NdjsonFileWriter {
    async fn write(&self, records: Vec<OutRecord>) -> Result<(), WriteError> {
        let mut buf = Vec::with_capacity(records.iter().map(|r| r.data.len() + 1).sum());
        for r in &records {
            buf.extend_from_slice(&r.data);
            if r.data.last() != Some(&b'\n') {
                buf.push(b'\n');
            }
        }
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        f.write_all(&buf)
            .and_then(|()| f.sync_data())
            .map_err(|e| WriteError { message: format!("{}: {e}", self.path.display()), retryable: true })
    }

    fn location(&self) -> String {
        self.path.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use weir_testkit::conformance::{WriterHarness, stream_writer_suite};

    struct Harness {
        path: PathBuf,
        writer: Arc<NdjsonFileWriter>,
    }

    #[async_trait]
    impl WriterHarness for Harness {
        fn writer(&self) -> Arc<dyn StreamWriter> {
            self.writer.clone()
        }
        async fn accepted(&self) -> Vec<bytes::Bytes> {
            let text = std::fs::read(&self.path).unwrap_or_default();
            text.split(|b| *b == b'\n').filter(|l| !l.is_empty()).map(bytes::Bytes::copy_from_slice).collect()
        }
    }

    #[tokio::test]
    async fn passes_the_conformance_suite() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out/records.ndjson");
        let writer = Arc::new(NdjsonFileWriter::open(&path).unwrap());
        stream_writer_suite(&Harness { path, writer }).await;
    }

    #[tokio::test]
    async fn appends_lines_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let w = NdjsonFileWriter::open(&dir.path().join("a/out.ndjson")).unwrap();
        let r =
            |d: &'static str| OutRecord { partition_key: "k".into(), data: bytes::Bytes::from_static(d.as_bytes()) };
        w.write(vec![r("{\"a\":1}"), r("{\"a\":2}\n")]).await.unwrap();
        w.write(vec![r("{\"a\":3}")]).await.unwrap();
        let text = std::fs::read_to_string(dir.path().join("a/out.ndjson")).unwrap();
        assert_eq!(text, "{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n");
    }
}

//! An in-memory [`StreamWriter`]: keeps every record accepted, in order, and can be
//! told to refuse writes (a stream that is down or throttling past its retries).

use std::sync::Mutex;

use async_trait::async_trait;
use weir_core::ports::{OutRecord, StreamWriter, WriteError};

/// Records accepted, in the order accepted.
#[derive(Debug, Default)]
pub struct MemoryStreamWriter {
    accepted: Mutex<Vec<OutRecord>>,
    /// Writes left to refuse (retryable errors, nothing accepted).
    refuse: Mutex<usize>,
}

impl MemoryStreamWriter {
    /// An empty writer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every record accepted so far.
    pub fn records(&self) -> Vec<OutRecord> {
        self.accepted.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Refuses the next `n` writes with a retryable error, accepting nothing of them.
    pub fn refuse_next(&self, n: usize) {
        *self.refuse.lock().unwrap_or_else(|p| p.into_inner()) = n;
    }
}

#[async_trait]
impl StreamWriter for MemoryStreamWriter {
    async fn write(&self, records: Vec<OutRecord>) -> Result<(), WriteError> {
        {
            let mut refuse = self.refuse.lock().unwrap_or_else(|p| p.into_inner());
            if *refuse > 0 {
                *refuse -= 1;
                return Err(WriteError { message: "refused (test)".into(), retryable: true });
            }
        }
        self.accepted.lock().unwrap_or_else(|p| p.into_inner()).extend(records);
        Ok(())
    }

    fn location(&self) -> String {
        "memory stream writer".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::{WriterHarness, stream_writer_suite};
    use std::sync::Arc;

    struct Harness(Arc<MemoryStreamWriter>);

    #[async_trait]
    impl WriterHarness for Harness {
        fn writer(&self) -> Arc<dyn StreamWriter> {
            self.0.clone()
        }
        async fn accepted(&self) -> Vec<bytes::Bytes> {
            self.0.records().into_iter().map(|r| r.data).collect()
        }
    }

    #[tokio::test]
    async fn passes_the_conformance_suite() {
        stream_writer_suite(&Harness(Arc::new(MemoryStreamWriter::new()))).await;
    }

    #[tokio::test]
    async fn refused_writes_accept_nothing() {
        let w = MemoryStreamWriter::new();
        w.refuse_next(1);
        let r = OutRecord { partition_key: "k".into(), data: bytes::Bytes::from_static(b"x") };
        let e = w.write(vec![r.clone()]).await.unwrap_err();
        assert!(e.retryable);
        assert!(w.records().is_empty());
        w.write(vec![r]).await.unwrap();
        assert_eq!(w.records().len(), 1);
    }
}

//! [`StreamWriter`] for a Kinesis stream: PutRecords through the [`Producer`] (500
//! records / 5 MiB per call, only failed records retried), wave by wave so per-key order
//! survives partial failures.

use async_trait::async_trait;
use weir_core::ports::{OutRecord, StreamWriter, WriteError, waves};

use super::producer::{Outgoing, Producer, check};

/// Writes to one Kinesis stream.
pub struct KinesisWriter {
    producer: Producer,
    stream: String,
    retried: std::sync::atomic::AtomicU64,
}

impl KinesisWriter {
    /// A writer for `stream`; `producer.deadline` bounds the retries of one wave.
    pub fn new(producer: Producer, stream: &str) -> Self {
        Self { producer, stream: stream.to_owned(), retried: Default::default() }
    }

    /// Records sent again after PutRecords reported them failed (throttling), so far.
    pub fn retried(&self) -> u64 {
        self.retried.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[async_trait]
impl StreamWriter for KinesisWriter {
    async fn write(&self, records: Vec<OutRecord>) -> Result<(), WriteError> {
        for wave in waves(records) {
            let outgoing: Vec<Outgoing> = wave
                .into_iter()
                .enumerate()
                .map(|(i, r)| Outgoing { id: i as u64, partition_key: r.partition_key, data: r.data })
                .collect();
            if let Some(bad) = outgoing.iter().find_map(|o| check(o).err()) {
                return Err(WriteError { message: bad, retryable: false });
            }
            let report = self.producer.put_all(outgoing).await;
            self.retried.fetch_add(report.retried_records, std::sync::atomic::Ordering::Relaxed);
            if let Some((_, reason)) = report.failed.first() {
                return Err(WriteError {
                    message: format!("{} records not accepted: {reason}", report.failed.len()),
                    retryable: true,
                });
            }
        }
        Ok(())
    }

    fn location(&self) -> String {
        format!("kinesis stream {}", self.stream)
    }
}

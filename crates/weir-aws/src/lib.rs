//! weir-aws: the ports of weir-core on the AWS SDK for Rust. No AWS type crosses a port.
//!
//! - [`AwsSettings`] / [`load_sdk_config`]: region, profile, credentials and
//!   per-service endpoints (emulators) from the standard aws-config chain.
//! - [`error`]: classification of SDK errors (throttling, transient, permanent) by
//!   typed variant and error code, and retries with backoff, jitter and a deadline.
//! - [`KinesisStream`]: stream catalog and shard readers (enhanced fan-out, polling),
//!   with KPL de-aggregation.
//! - [`DynamoDbLeaseTable`]: leases and checkpoints in DynamoDB, every write conditional.
//! - [`S3ObjectSink`]: create-only puts (`If-None-Match: *`), multipart above a
//!   threshold, server-side encryption, list and get.
//! - [`LambdaInvoker`] / [`SnsPublisher`]: the Lambda transform and SNS alert ports.
//! - [`clients`]: every SDK client weir builds, from one [`clients::Endpoints`].
//! - [`requests`]: every request to AWS counted by an SDK interceptor.
#![warn(missing_docs)]

pub mod clients;
mod dynamodb;
pub mod error;
pub mod glue;
pub mod iceberg_catalog;
pub mod iceberg_rest;
pub mod iceberg_s3tables;
pub mod kcl_table;
pub mod kinesis;
mod lambda;
pub mod requests;
mod s3;
mod settings;
mod sns;

pub use dynamodb::DynamoDbLeaseTable;
pub use kinesis::{KinesisOptions, KinesisStream};
pub use lambda::LambdaInvoker;
pub use requests::{RequestCounter, RequestLedger};
pub use s3::{S3ObjectSink, S3Options, ServerSideEncryption};
pub use settings::{AwsSettings, Service, load_sdk_config, request_timeouts};
pub use sns::SnsPublisher;

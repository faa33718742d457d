//! Object sink on S3.
//!
//! Puts are create-only (`If-None-Match: *`): a `412 PreconditionFailed` means the key
//! exists and nothing was written. Bodies above `multipart_threshold` go through a
//! multipart upload whose completion is also conditional; a failed upload is aborted.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_s3::Client;
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use bytes::Bytes;
use weir_core::ports::{ObjectMeta, ObjectSink, PutOptions, PutOutcome, SinkError, validate_key};

use crate::error::{ErrorClass, classify, describe, retry};

/// Server-side encryption of written objects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ServerSideEncryption {
    /// The bucket's default.
    #[default]
    BucketDefault,
    /// SSE-S3 (AES256).
    S3,
    /// SSE-KMS with this key (id, alias or ARN); `None` for the AWS managed key.
    Kms(Option<String>),
}

/// Options of an [`S3ObjectSink`].
#[derive(Debug, Clone)]
pub struct S3Options {
    /// Bodies at or above this size use a multipart upload (minimum 5 MiB).
    pub multipart_threshold: usize,
    /// Part size of multipart uploads (minimum 5 MiB).
    pub part_size: usize,
    /// Encryption of new objects.
    pub encryption: ServerSideEncryption,
}

impl Default for S3Options {
    fn default() -> Self {
        Self {
            multipart_threshold: 16 * 1024 * 1024,
            part_size: 8 * 1024 * 1024,
            encryption: ServerSideEncryption::BucketDefault,
        }
    }
}

/// Objects in one S3 bucket.
#[derive(Debug, Clone)]
pub struct S3ObjectSink {
    client: Client,
    bucket: String,
    options: S3Options,
}

fn store_err<E>(what: &str, e: aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse>) -> SinkError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let retryable = classify(&e) != ErrorClass::Permanent;
    SinkError::Store { message: format!("s3 {what}: {}", describe(&e)), retryable, source: Some(Box::new(e)) }
}

fn precondition_failed<E: ProvideErrorMetadata>(
    e: &aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> bool {
    match e {
        aws_sdk_s3::error::SdkError::ServiceError(se) => {
            se.err().code() == Some("PreconditionFailed") || se.raw().status().as_u16() == 412
        }
        _ => false,
    }
}

impl S3ObjectSink {
    /// A sink writing to `bucket`. Use `force_path_style(true)` on the client for
    /// emulators.
    pub fn new(client: Client, bucket: &str, options: S3Options) -> Self {
        let min = 5 * 1024 * 1024;
        let options = S3Options {
            multipart_threshold: options.multipart_threshold.max(min),
            part_size: options.part_size.max(min),
            ..options
        };
        Self { client, bucket: bucket.to_owned(), options }
    }

    /// Creates the bucket if it does not exist (tests, first runs).
    pub async fn ensure_bucket(&self) -> Result<(), SinkError> {
        if self.client.head_bucket().bucket(&self.bucket).send().await.is_ok() {
            return Ok(());
        }
        match self.client.create_bucket().bucket(&self.bucket).send().await {
            Ok(_) => Ok(()),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_bucket_already_owned_by_you()) => Ok(()),
            Err(e) => Err(store_err(&format!("create bucket {}", self.bucket), e)),
        }
    }

    /// The `x-amz-server-side-encryption` value and KMS key of new objects.
    fn encryption(&self) -> (Option<aws_sdk_s3::types::ServerSideEncryption>, Option<String>) {
        use aws_sdk_s3::types::ServerSideEncryption as Sse;
        match &self.options.encryption {
            ServerSideEncryption::BucketDefault => (None, None),
            ServerSideEncryption::S3 => (Some(Sse::Aes256), None),
            ServerSideEncryption::Kms(key_id) => (Some(Sse::AwsKms), key_id.clone()),
        }
    }

    fn metadata(options: &PutOptions) -> Option<HashMap<String, String>> {
        (!options.metadata.is_empty())
            .then(|| options.metadata.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
    }

    async fn put_single(&self, key: &str, body: Bytes, options: &PutOptions) -> Result<PutOutcome, SinkError> {
        let mut req = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .if_none_match("*")
            .body(ByteStream::from(body))
            .set_content_type(options.content_type.as_deref().map(str::to_owned))
            .set_content_encoding(options.content_encoding.as_deref().map(str::to_owned))
            .set_metadata(Self::metadata(options));
        let (sse, kms_key) = self.encryption();
        req = req.set_server_side_encryption(sse).set_ssekms_key_id(kms_key);
        match req.send().await {
            Ok(_) => Ok(PutOutcome::Created),
            Err(e) if precondition_failed(&e) => Ok(PutOutcome::AlreadyExists),
            Err(e) => Err(store_err(&format!("put {key}"), e)),
        }
    }

    async fn put_multipart(&self, key: &str, body: Bytes, options: &PutOptions) -> Result<PutOutcome, SinkError> {
        let mut req = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .set_content_type(options.content_type.as_deref().map(str::to_owned))
            .set_content_encoding(options.content_encoding.as_deref().map(str::to_owned))
            .set_metadata(Self::metadata(options));
        let (sse, kms_key) = self.encryption();
        req = req.set_server_side_encryption(sse).set_ssekms_key_id(kms_key);
        let created = req.send().await.map_err(|e| store_err(&format!("create multipart upload {key}"), e))?;
        let Some(upload_id) = created.upload_id().map(str::to_owned) else {
            return Err(SinkError::Store { message: "s3 returned no upload id".into(), retryable: true, source: None });
        };
        let result = self.upload_parts(key, &upload_id, body).await;
        if !matches!(result, Ok(PutOutcome::Created)) {
            let abort =
                self.client.abort_multipart_upload().bucket(&self.bucket).key(key).upload_id(&upload_id).send().await;
            if let Err(e) = abort {
                tracing::warn!(%key, error = %describe(&e), "abort of multipart upload failed");
            }
        }
        result
    }

    async fn upload_parts(&self, key: &str, upload_id: &str, body: Bytes) -> Result<PutOutcome, SinkError> {
        let mut parts = Vec::new();
        for (i, start) in (0..body.len()).step_by(self.options.part_size).enumerate() {
            let end = (start + self.options.part_size).min(body.len());
            let number = i32::try_from(i + 1).unwrap_or(i32::MAX);
            let out = self
                .client
                .upload_part()
                .bucket(&self.bucket)
                .key(key)
                .upload_id(upload_id)
                .part_number(number)
                .body(ByteStream::from(body.slice(start..end)))
                .send()
                .await
                .map_err(|e| store_err(&format!("upload part {number} of {key}"), e))?;
            parts.push(CompletedPart::builder().part_number(number).set_e_tag(out.e_tag().map(str::to_owned)).build());
        }
        let done = self
            .client
            .complete_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(upload_id)
            .if_none_match("*")
            .multipart_upload(CompletedMultipartUpload::builder().set_parts(Some(parts)).build())
            .send()
            .await;
        match done {
            Ok(_) => Ok(PutOutcome::Created),
            Err(e) if precondition_failed(&e) => Ok(PutOutcome::AlreadyExists),
            Err(e) => Err(store_err(&format!("complete multipart upload {key}"), e)),
        }
    }
}

#[async_trait]
impl ObjectSink for S3ObjectSink {
    async fn put_if_absent(&self, key: &str, body: Bytes, options: &PutOptions) -> Result<PutOutcome, SinkError> {
        validate_key(key)?;
        if body.len() >= self.options.multipart_threshold {
            self.put_multipart(key, body, options).await
        } else {
            self.put_single(key, body, options).await
        }
    }

    async fn get(&self, key: &str) -> Result<Option<Bytes>, SinkError> {
        validate_key(key)?;
        // Reads are idempotent: retry passing failures within a deadline.
        retry(READ_DEADLINE, || self.get_once(key), sink_class).await
    }

    async fn stat(&self, key: &str) -> Result<Option<ObjectMeta>, SinkError> {
        validate_key(key)?;
        retry(READ_DEADLINE, || self.stat_once(key), sink_class).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, SinkError> {
        retry(READ_DEADLINE, || self.list_once(prefix), sink_class).await
    }

    async fn delete(&self, key: &str) -> Result<(), SinkError> {
        validate_key(key)?;
        // Deleting is idempotent (an absent key succeeds): retried like reads.
        retry(READ_DEADLINE, || self.delete_once(key), sink_class).await
    }

    fn location(&self) -> String {
        format!("s3://{}/", self.bucket)
    }
}

/// How long reads (get, list) are retried.
const READ_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

fn sink_class(e: &SinkError) -> ErrorClass {
    if e.is_retryable() { ErrorClass::Transient } else { ErrorClass::Permanent }
}

impl S3ObjectSink {
    async fn get_once(&self, key: &str) -> Result<Option<Bytes>, SinkError> {
        match self.client.get_object().bucket(&self.bucket).key(key).send().await {
            Ok(out) => {
                let data = out.body.collect().await.map_err(|e| SinkError::Store {
                    message: format!("s3 read body of {key}: {e}"),
                    retryable: true,
                    source: Some(Box::new(e)),
                })?;
                Ok(Some(data.into_bytes()))
            }
            Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => Ok(None),
            Err(e) => Err(store_err(&format!("get {key}"), e)),
        }
    }

    async fn stat_once(&self, key: &str) -> Result<Option<ObjectMeta>, SinkError> {
        match self.client.head_object().bucket(&self.bucket).key(key).send().await {
            Ok(out) => Ok(Some(ObjectMeta {
                key: key.to_owned(),
                size: out.content_length().unwrap_or_default().max(0) as u64,
            })),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_not_found()) => Ok(None),
            Err(e) if e.raw_response().is_some_and(|r| r.status().as_u16() == 404) => Ok(None),
            Err(e) => Err(store_err(&format!("head {key}"), e)),
        }
    }

    async fn delete_once(&self, key: &str) -> Result<(), SinkError> {
        match self.client.delete_object().bucket(&self.bucket).key(key).send().await {
            Ok(_) => Ok(()),
            Err(e) => Err(store_err(&format!("delete {key}"), e)),
        }
    }

    async fn list_once(&self, prefix: &str) -> Result<Vec<ObjectMeta>, SinkError> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(prefix)
                .set_continuation_token(token.take())
                .send()
                .await
                .map_err(|e| store_err(&format!("list {prefix}"), e))?;
            for o in page.contents() {
                if let Some(key) = o.key() {
                    out.push(ObjectMeta { key: key.to_owned(), size: o.size().unwrap_or(0).max(0) as u64 });
                }
            }
            match page.next_continuation_token() {
                Some(t) if page.is_truncated() == Some(true) => token = Some(t.to_owned()),
                _ => break,
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }
}

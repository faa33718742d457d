//! Every AWS client weir builds. Each carries a [`RequestCounter`], so every request
//! is counted on `/metrics` (`weir_aws_requests_total{service, operation, outcome}`,
//! retries, throttles) and in the process's [`ledger`], whichever call site made it.

use std::sync::{Arc, OnceLock};

use aws_config::SdkConfig;
use weir_aws::{RequestCounter, RequestLedger, Service};

use crate::config::AwsSection;
use crate::run::sdk;

/// The request counts of this process: every client below records into it.
pub(crate) fn ledger() -> Arc<RequestLedger> {
    static LEDGER: OnceLock<Arc<RequestLedger>> = OnceLock::new();
    LEDGER.get_or_init(RequestLedger::new).clone()
}

fn counter(service: Service) -> RequestCounter {
    RequestCounter::new(service, ledger())
}

/// Kinesis, with `kinesis_endpoint_url`.
pub(crate) async fn kinesis(aws: &AwsSection) -> aws_sdk_kinesis::Client {
    kinesis_from(&sdk(aws, Service::Kinesis).await)
}

/// Kinesis from an SDK config loaded elsewhere (`weir put`).
pub(crate) fn kinesis_from(sdk: &SdkConfig) -> aws_sdk_kinesis::Client {
    let conf = aws_sdk_kinesis::config::Builder::from(sdk).interceptor(counter(Service::Kinesis)).build();
    aws_sdk_kinesis::Client::from_conf(conf)
}

/// DynamoDB, with `dynamodb_endpoint_url`.
pub(crate) async fn dynamodb(aws: &AwsSection) -> aws_sdk_dynamodb::Client {
    let shared = sdk(aws, Service::DynamoDb).await;
    let conf = aws_sdk_dynamodb::config::Builder::from(&shared).interceptor(counter(Service::DynamoDb)).build();
    aws_sdk_dynamodb::Client::from_conf(conf)
}

/// S3, with `s3_endpoint_url` and `s3_force_path_style`.
pub(crate) async fn s3(aws: &AwsSection) -> aws_sdk_s3::Client {
    let shared = sdk(aws, Service::S3).await;
    let conf = aws_sdk_s3::config::Builder::from(&shared)
        .force_path_style(aws.s3_force_path_style)
        .interceptor(counter(Service::S3))
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}

/// Lambda, with `lambda_endpoint_url`.
pub(crate) async fn lambda(aws: &AwsSection) -> aws_sdk_lambda::Client {
    let shared = sdk(aws, Service::Lambda).await;
    let conf = aws_sdk_lambda::config::Builder::from(&shared).interceptor(counter(Service::Lambda)).build();
    aws_sdk_lambda::Client::from_conf(conf)
}

/// Glue, with `glue_endpoint_url`.
pub(crate) async fn glue(aws: &AwsSection, region: Option<&str>) -> aws_sdk_glue::Client {
    let shared = sdk(aws, Service::Glue).await;
    let mut conf = aws_sdk_glue::config::Builder::from(&shared).interceptor(counter(Service::Glue));
    if let Some(r) = region {
        conf = conf.region(aws_sdk_glue::config::Region::new(r.to_owned()));
    }
    let conf = conf.build();
    aws_sdk_glue::Client::from_conf(conf)
}

/// Iceberg tables of the Glue Data Catalog of `catalog_id` (default: the caller's), in
/// `region` when given: Glue with `glue_endpoint_url`, the tables' files through S3 with
/// `s3_endpoint_url`, signed with the same credentials.
pub(crate) async fn iceberg_glue(
    aws: &AwsSection,
    catalog_id: Option<String>,
    region: Option<&str>,
) -> Arc<dyn iceberg::Catalog> {
    let client = glue(aws, region).await;
    let s3 = sdk(aws, Service::S3).await;
    let files = weir_aws::iceberg_catalog::S3FileSettings {
        region: region.map(str::to_owned).or_else(|| s3.region().map(|r| r.to_string())),
        endpoint_url: aws.s3_endpoint_url.clone().or_else(|| aws.endpoint_url.clone()),
        credentials: s3.credentials_provider(),
    };
    Arc::new(weir_aws::iceberg_catalog::GlueCatalog::new(client, catalog_id, &files))
}

/// Iceberg tables of the S3 table bucket `bucket_arn`: S3 Tables with
/// `s3tables_endpoint_url`, the tables' files through S3 with `s3_endpoint_url`, signed
/// with the same credentials.
pub(crate) async fn iceberg_s3tables(aws: &AwsSection, bucket_arn: &str, region: &str) -> Arc<dyn iceberg::Catalog> {
    let shared = sdk(aws, Service::S3Tables).await;
    let conf = aws_sdk_s3tables::config::Builder::from(&shared)
        .interceptor(counter(Service::S3Tables))
        .region(aws_sdk_s3tables::config::Region::new(region.to_owned()))
        .build();
    let s3 = sdk(aws, Service::S3).await;
    let files = weir_aws::iceberg_catalog::S3FileSettings {
        region: Some(region.to_owned()),
        endpoint_url: aws.s3_endpoint_url.clone().or_else(|| aws.endpoint_url.clone()),
        credentials: s3.credentials_provider(),
    };
    let client = aws_sdk_s3tables::Client::from_conf(conf);
    Arc::new(weir_aws::iceberg_s3tables::S3TablesCatalog::new(client, bucket_arn, &files))
}

/// Iceberg tables of the REST catalog `settings` describes, their files on S3 through
/// `s3_endpoint_url` and the same credentials (or on the local file system).
pub(crate) async fn iceberg_rest(
    aws: &AwsSection,
    settings: weir_aws::iceberg_rest::RestSettings,
) -> iceberg::Result<Arc<dyn iceberg::Catalog>> {
    let s3 = sdk(aws, Service::S3).await;
    let files = weir_aws::iceberg_catalog::S3FileSettings {
        region: s3.region().map(|r| r.to_string()),
        endpoint_url: aws.s3_endpoint_url.clone().or_else(|| aws.endpoint_url.clone()),
        credentials: s3.credentials_provider(),
    };
    weir_aws::iceberg_rest::rest_catalog(settings, &files).await
}

/// SNS, with `sns_endpoint_url`.
pub(crate) async fn sns(aws: &AwsSection) -> aws_sdk_sns::Client {
    let shared = sdk(aws, Service::Sns).await;
    let conf = aws_sdk_sns::config::Builder::from(&shared).interceptor(counter(Service::Sns)).build();
    aws_sdk_sns::Client::from_conf(conf)
}

/// One line naming every request this process made to AWS so far, by service and
/// operation (`dynamodb Scan 2, kinesis ListShards 1`), with retries and throttled
/// attempts when there were any; `None` when it made none.
pub(crate) fn summary() -> Option<String> {
    let counts = ledger().snapshot();
    if counts.is_empty() {
        return None;
    }
    let (mut retries, mut throttles) = (0, 0);
    let calls: Vec<String> = counts
        .iter()
        .map(|((service, operation), c)| {
            retries += c.retries;
            throttles += c.throttles;
            format!("{service} {operation} {}", c.total_calls())
        })
        .collect();
    let mut line = format!("AWS requests: {}", calls.join(", "));
    if retries + throttles > 0 {
        line.push_str(&format!(" ({retries} retried, {throttles} throttled)"));
    }
    Some(line)
}

//! Every AWS client weir builds, from one [`Endpoints`]: region, profile and each
//! service's endpoint. Each client carries a [`RequestCounter`], so every request is
//! counted on `/metrics` (`weir_aws_requests_total{service, operation, outcome}`,
//! retries, throttles) and in the process's [`ledger`], whichever call site made it.

use std::sync::{Arc, OnceLock};

use aws_config::SdkConfig;
use tokio::sync::OnceCell;

use crate::{AwsSettings, RequestCounter, RequestLedger, Service, load_sdk_config};

/// How to reach AWS (or emulators): credentials come from the standard chain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Endpoints {
    /// Region; default from the environment or profile.
    pub region: Option<String>,
    /// Named profile.
    pub profile: Option<String>,
    /// Endpoint for every service (an emulator).
    pub endpoint_url: Option<String>,
    /// Endpoints of single services, overriding `endpoint_url`.
    pub kinesis: Option<String>,
    /// DynamoDB's endpoint.
    pub dynamodb: Option<String>,
    /// S3's endpoint.
    pub s3: Option<String>,
    /// Lambda's endpoint.
    pub lambda: Option<String>,
    /// SNS's endpoint.
    pub sns: Option<String>,
    /// Glue's endpoint.
    pub glue: Option<String>,
    /// S3 Tables' endpoint.
    pub s3tables: Option<String>,
    /// Path-style S3 addressing (emulators).
    pub s3_force_path_style: bool,
}

impl Endpoints {
    /// The endpoint of `service`: its own, else `endpoint_url`, else AWS's.
    pub fn endpoint(&self, service: Service) -> Option<String> {
        let own = match service {
            Service::Kinesis => &self.kinesis,
            Service::DynamoDb => &self.dynamodb,
            Service::S3 => &self.s3,
            Service::Lambda => &self.lambda,
            Service::Sns => &self.sns,
            Service::Glue => &self.glue,
            Service::S3Tables => &self.s3tables,
        };
        own.clone().or_else(|| self.endpoint_url.clone())
    }
}

/// Clients of [`Endpoints`], each created the first time it is asked for (a worker
/// that uses no AWS service never loads AWS settings).
#[derive(Default)]
pub struct Clients {
    endpoints: Endpoints,
    s3: OnceCell<aws_sdk_s3::Client>,
    kinesis: OnceCell<aws_sdk_kinesis::Client>,
    lambda: OnceCell<aws_sdk_lambda::Client>,
    region: OnceCell<String>,
    sns: OnceCell<aws_sdk_sns::Client>,
}

impl Clients {
    /// Clients for `endpoints`.
    pub fn new(endpoints: Endpoints) -> Self {
        Self { endpoints, ..Self::default() }
    }

    /// S3, with `s3_endpoint_url` and `s3_force_path_style`.
    pub async fn s3(&self) -> aws_sdk_s3::Client {
        self.s3.get_or_init(|| s3(&self.endpoints)).await.clone()
    }

    /// Kinesis, with `kinesis_endpoint_url`.
    pub async fn kinesis(&self) -> aws_sdk_kinesis::Client {
        let a = &self.endpoints;
        self.kinesis.get_or_init(|| kinesis(a)).await.clone()
    }

    /// Lambda, with `lambda_endpoint_url`.
    pub async fn lambda(&self) -> aws_sdk_lambda::Client {
        let a = &self.endpoints;
        self.lambda.get_or_init(|| lambda(a)).await.clone()
    }

    /// The region: `[aws] region`, else the environment's or profile's (empty if none).
    pub async fn region(&self) -> String {
        let a = &self.endpoints;
        self.region
            .get_or_init(|| async { sdk(a, Service::Sns).await.region().map(|r| r.to_string()).unwrap_or_default() })
            .await
            .clone()
    }

    /// Glue, with `glue_endpoint_url`, in `region` when given (made for each call: an
    /// archiver reads its table once).
    pub async fn glue(&self, region: Option<&str>) -> aws_sdk_glue::Client {
        glue(&self.endpoints, region).await
    }

    /// Iceberg tables of a Glue Data Catalog (`catalog_id`: its account, default the
    /// caller's), in `region` when given; table files through S3 with the same
    /// credentials and `s3_endpoint_url`.
    pub async fn iceberg_glue(&self, catalog_id: Option<String>, region: Option<&str>) -> Arc<dyn iceberg::Catalog> {
        iceberg_glue(&self.endpoints, catalog_id, region).await
    }

    /// Iceberg tables of the S3 table bucket `bucket_arn` in `region`; table files
    /// through S3 with the same credentials and `s3_endpoint_url`.
    pub async fn iceberg_s3tables(&self, bucket_arn: &str, region: &str) -> Arc<dyn iceberg::Catalog> {
        iceberg_s3tables(&self.endpoints, bucket_arn, region).await
    }

    /// Iceberg tables of the REST catalog `settings` describes; table files on S3
    /// through the same credentials and `s3_endpoint_url`.
    pub async fn iceberg_rest(
        &self,
        settings: crate::iceberg_rest::RestSettings,
    ) -> iceberg::Result<Arc<dyn iceberg::Catalog>> {
        iceberg_rest(&self.endpoints, settings).await
    }

    /// SNS, with `sns_endpoint_url`.
    pub async fn sns(&self) -> aws_sdk_sns::Client {
        let a = &self.endpoints;
        self.sns.get_or_init(|| sns(a)).await.clone()
    }
}

/// The SDK configuration for `service`: the region and profile, the service's endpoint
/// ([`Endpoints::endpoint`]), and its request timeouts.
pub async fn sdk(aws: &Endpoints, service: Service) -> SdkConfig {
    let settings = AwsSettings {
        region: aws.region.clone(),
        profile: aws.profile.clone(),
        endpoint_url: aws.endpoint(service),
        static_credentials: None,
        timeouts: Some(service.timeouts()),
    };
    load_sdk_config(&settings).await
}

/// The request counts of this process: every client below records into it.
pub fn ledger() -> Arc<RequestLedger> {
    static LEDGER: OnceLock<Arc<RequestLedger>> = OnceLock::new();
    LEDGER.get_or_init(RequestLedger::new).clone()
}

fn counter(service: Service) -> RequestCounter {
    RequestCounter::new(service, ledger())
}

/// Kinesis, with `kinesis_endpoint_url`.
pub async fn kinesis(aws: &Endpoints) -> aws_sdk_kinesis::Client {
    kinesis_from(&sdk(aws, Service::Kinesis).await)
}

/// Kinesis from an SDK config loaded elsewhere (`weir put`).
pub fn kinesis_from(sdk: &SdkConfig) -> aws_sdk_kinesis::Client {
    let conf = aws_sdk_kinesis::config::Builder::from(sdk).interceptor(counter(Service::Kinesis)).build();
    aws_sdk_kinesis::Client::from_conf(conf)
}

/// DynamoDB, with `dynamodb_endpoint_url`.
pub async fn dynamodb(aws: &Endpoints) -> aws_sdk_dynamodb::Client {
    let shared = sdk(aws, Service::DynamoDb).await;
    let conf = aws_sdk_dynamodb::config::Builder::from(&shared).interceptor(counter(Service::DynamoDb)).build();
    aws_sdk_dynamodb::Client::from_conf(conf)
}

/// S3, with `s3_endpoint_url` and `s3_force_path_style`.
pub async fn s3(aws: &Endpoints) -> aws_sdk_s3::Client {
    let shared = sdk(aws, Service::S3).await;
    let conf = aws_sdk_s3::config::Builder::from(&shared)
        .force_path_style(aws.s3_force_path_style)
        .interceptor(counter(Service::S3))
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}

/// Lambda, with `lambda_endpoint_url`.
pub async fn lambda(aws: &Endpoints) -> aws_sdk_lambda::Client {
    let shared = sdk(aws, Service::Lambda).await;
    let conf = aws_sdk_lambda::config::Builder::from(&shared).interceptor(counter(Service::Lambda)).build();
    aws_sdk_lambda::Client::from_conf(conf)
}

/// Glue, with `glue_endpoint_url`.
pub async fn glue(aws: &Endpoints, region: Option<&str>) -> aws_sdk_glue::Client {
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
pub async fn iceberg_glue(
    aws: &Endpoints,
    catalog_id: Option<String>,
    region: Option<&str>,
) -> Arc<dyn iceberg::Catalog> {
    let client = glue(aws, region).await;
    let s3 = sdk(aws, Service::S3).await;
    let files = crate::iceberg_catalog::S3FileSettings {
        region: region.map(str::to_owned).or_else(|| s3.region().map(|r| r.to_string())),
        endpoint_url: aws.endpoint(Service::S3),
        credentials: s3.credentials_provider(),
    };
    Arc::new(crate::iceberg_catalog::GlueCatalog::new(client, catalog_id, &files))
}

/// Iceberg tables of the S3 table bucket `bucket_arn`: S3 Tables with
/// `s3tables_endpoint_url`, the tables' files through S3 with `s3_endpoint_url`, signed
/// with the same credentials.
pub async fn iceberg_s3tables(aws: &Endpoints, bucket_arn: &str, region: &str) -> Arc<dyn iceberg::Catalog> {
    let shared = sdk(aws, Service::S3Tables).await;
    let conf = aws_sdk_s3tables::config::Builder::from(&shared)
        .interceptor(counter(Service::S3Tables))
        .region(aws_sdk_s3tables::config::Region::new(region.to_owned()))
        .build();
    let s3 = sdk(aws, Service::S3).await;
    let files = crate::iceberg_catalog::S3FileSettings {
        region: Some(region.to_owned()),
        endpoint_url: aws.endpoint(Service::S3),
        credentials: s3.credentials_provider(),
    };
    let client = aws_sdk_s3tables::Client::from_conf(conf);
    Arc::new(crate::iceberg_s3tables::S3TablesCatalog::new(client, bucket_arn, &files))
}

/// Iceberg tables of the REST catalog `settings` describes, their files on S3 through
/// `s3_endpoint_url` and the same credentials (or on the local file system).
pub async fn iceberg_rest(
    aws: &Endpoints,
    settings: crate::iceberg_rest::RestSettings,
) -> iceberg::Result<Arc<dyn iceberg::Catalog>> {
    let s3 = sdk(aws, Service::S3).await;
    let files = crate::iceberg_catalog::S3FileSettings {
        region: s3.region().map(|r| r.to_string()),
        endpoint_url: aws.endpoint(Service::S3),
        credentials: s3.credentials_provider(),
    };
    crate::iceberg_rest::rest_catalog(settings, &files).await
}

/// SNS, with `sns_endpoint_url`.
pub async fn sns(aws: &Endpoints) -> aws_sdk_sns::Client {
    let shared = sdk(aws, Service::Sns).await;
    let conf = aws_sdk_sns::config::Builder::from(&shared).interceptor(counter(Service::Sns)).build();
    aws_sdk_sns::Client::from_conf(conf)
}

/// One line naming every request this process made to AWS so far, by service and
/// operation (`dynamodb Scan 2, kinesis ListShards 1`), with retries and throttled
/// attempts when there were any; `None` when it made none.
pub fn summary() -> Option<String> {
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

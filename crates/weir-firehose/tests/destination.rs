//! Reading an existing delivery stream's destination from real files, in the three forms.
#![allow(clippy::unwrap_used, clippy::print_stdout)] // a test: a failed expectation is a failed test

use std::collections::BTreeMap;
use std::time::Duration;

use weir_core::Timestamp;
use weir_firehose::prefix::Evaluation;
use weir_firehose::{
    Compression, Decompression, ExtendedS3Destination, Problem, from_cloudformation_yaml, from_json, from_toml,
    validate,
};

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn keys() -> BTreeMap<String, String> {
    [("tenantId".into(), "t-007".into()), ("toolName".into(), "search_docs".into())].into()
}

#[test]
fn the_design_notes_stream_reads_the_same_in_every_form() {
    let forms: Vec<(&str, ExtendedS3Destination)> = vec![
        ("yaml", from_cloudformation_yaml(&fixture("mcp-delivery-stream.yaml"), None).unwrap()),
        ("json", from_json(&fixture("mcp-destination.json")).unwrap()),
        ("toml", from_toml(&fixture("mcp-destination.toml")).unwrap()),
    ];
    for (form, d) in forms {
        let s = validate(&d).unwrap_or_else(|p| panic!("{form}: {p:?}"));
        assert_eq!(s.buffer_bytes, 64 * 1024 * 1024, "{form}");
        assert_eq!(s.buffer_interval, Duration::from_secs(300));
        assert_eq!(s.compression, Compression::Gzip);
        assert_eq!(s.file_extension, ".gz");
        assert_eq!(s.dynamic_partitioning_retry, Some(Duration::from_secs(300)));
        assert_eq!(s.metadata_query.as_deref(), Some("{tenantId: .tenant_id, toolName: .tool_name}"));
        let k = keys();
        let at = Evaluation {
            oldest_arrival: Timestamp::from_millis(1_535_365_800_000),
            time_zone: s.time_zone,
            partition_keys: &k,
            error_output_type: "partitioning-failed",
        };
        let hour = if form == "toml" { "19" } else { "10" };
        assert_eq!(
            s.prefixes.data.evaluate(&at).unwrap(),
            format!("tool-events/tenant=t-007/tool=search_docs/year=2018/month=08/day=27/hour={hour}/"),
            "{form}"
        );
        assert!(
            s.prefixes.error.evaluate(&at).unwrap().starts_with("tool-events-errors/partitioning-failed/year=2018/")
        );
    }
}

#[test]
fn cloudformation_specifics() {
    let d = from_cloudformation_yaml(&fixture("mcp-delivery-stream.yaml"), None).unwrap();
    assert_eq!(d.bucket_arn.clone().unwrap(), "!GetAtt EventsBucket.Arn", "intrinsic functions are kept as text");
    let s = validate(&d).unwrap();
    let lambda = s.lambda.unwrap();
    assert_eq!(lambda.arn, "!GetAtt TransformFunction.Arn");
    assert_eq!(lambda.buffer_bytes, 3 * 1024 * 1024);
    assert_eq!(lambda.buffer_interval, Duration::from_secs(60));
    assert_eq!(lambda.retries, 3);
    assert!(s.warnings.iter().any(|w| w.contains("RoleARN is accepted and ignored")));
    let missing = from_cloudformation_yaml(&fixture("mcp-delivery-stream.yaml"), Some("Other")).unwrap_err();
    assert!(missing.to_string().contains("no AWS::KinesisFirehose::DeliveryStream resource named Other"));
}

fn problems(json: &str) -> Vec<Problem> {
    validate(&from_json(json).unwrap()).unwrap_err()
}

fn has(problems: &[Problem], field: &str, words: &str) -> bool {
    problems.iter().any(|p| p.field == field && p.reason.contains(words))
}

#[test]
fn every_problem_is_reported_with_its_field() {
    let p = problems(
        r#"{"Prefix": "a/", "BufferingHints": {"SizeInMBs": 0, "IntervalInSeconds": 901},
            "CompressionFormat": "BROTLI", "CustomTimeZone": "Mars/Olympus", "FileExtension": "gz",
            "DynamicPartitioningConfiguration": {"RetryOptions": {"DurationInSeconds": 7201}},
            "Prefx": "typo"}"#,
    );
    assert!(has(&p, "BufferingHints.SizeInMBs", "outside 1–128"), "{p:?}");
    assert!(has(&p, "BufferingHints.IntervalInSeconds", "outside 0–900"));
    assert!(has(&p, "CompressionFormat", "BROTLI"));
    assert!(has(&p, "CustomTimeZone", "Mars/Olympus"));
    assert!(has(&p, "FileExtension", "must start with '.'"));
    assert!(has(&p, "DynamicPartitioningConfiguration.RetryOptions.DurationInSeconds", "outside 0–7200"));
    assert!(has(&p, "Prefx", "unknown field"));
    assert_eq!(p.len(), 7, "{p:?}");
}

#[test]
fn firehose_rules_across_fields() {
    let dp_small = problems(
        r#"{"Prefix": "t=!{partitionKeyFromQuery:t}/", "ErrorOutputPrefix": "e/!{firehose:error-output-type}/",
            "BufferingHints": {"SizeInMBs": 5}, "DynamicPartitioningConfiguration": {"Enabled": true},
            "ProcessingConfiguration": {"Processors": [{"Type": "MetadataExtraction", "Parameters": [
              {"ParameterName": "MetadataExtractionQuery", "ParameterValue": "{t: .t}"}]}]}}"#,
    );
    assert!(has(&dp_small, "BufferingHints.SizeInMBs", "outside 64–128"), "{dp_small:?}");
    assert!(
        has(
            &dp_small,
            "BufferingHints.SizeInMBs",
            "(Firehose's range with dynamic partitioning enabled; without it, 1–128)"
        ),
        "the message says why the range is 64–128: {dp_small:?}"
    );
    let no_keys_source = problems(
        r#"{"Prefix": "t=!{partitionKeyFromQuery:t}/", "ErrorOutputPrefix": "e/!{firehose:error-output-type}/",
            "DynamicPartitioningConfiguration": {"Enabled": true}}"#,
    );
    assert!(has(&no_keys_source, "DynamicPartitioningConfiguration", "no MetadataExtraction or Lambda"));
    let no_error_prefix = problems(r#"{"Prefix": "a/!{timestamp:yyyy}/"}"#);
    assert!(has(&no_error_prefix, "Prefix / ErrorOutputPrefix", "can't be null"));
    let bad_lambda = problems(
        r#"{"ProcessingConfiguration": {"Processors": [{"Type": "Lambda", "Parameters": [
              {"ParameterName": "BufferSizeInMBs", "ParameterValue": "4"},
              {"ParameterName": "NumberOfRetries", "ParameterValue": "many"}]},
              {"Type": "CloudWatchLogProcessing"}, {"Type": "Deflate"}]}}"#,
    );
    assert!(has(&bad_lambda, "ProcessingConfiguration.Processors[0].LambdaArn", "needs LambdaArn"), "{bad_lambda:?}");
    assert!(has(&bad_lambda, "ProcessingConfiguration.Processors[0].BufferSizeInMBs", "outside"));
    assert!(has(&bad_lambda, "ProcessingConfiguration.Processors[0].NumberOfRetries", "\"many\" is not a number"));
    assert!(has(&bad_lambda, "ProcessingConfiguration.Processors[1]", "needs a Decompression processor"));
    assert!(has(&bad_lambda, "ProcessingConfiguration.Processors[2].Type", "\"Deflate\" is not a processor"));
    let engine = problems(
        r#"{"ProcessingConfiguration": {"Processors": [{"Type": "MetadataExtraction", "Parameters": [
              {"ParameterName": "MetadataExtractionQuery", "ParameterValue": ".a"},
              {"ParameterName": "JsonParsingEngine", "ParameterValue": "JQ-1.7"}]}]}}"#,
    );
    assert!(has(&engine, "ProcessingConfiguration.Processors[0].JsonParsingEngine", "only JQ-1.6"));
}

#[test]
fn defaults_and_the_newline_warning() {
    let s = validate(&from_json("{}").unwrap()).unwrap();
    assert_eq!(s.buffer_bytes, 5 * 1024 * 1024);
    assert_eq!(s.buffer_interval, Duration::from_secs(300));
    assert_eq!(s.compression, Compression::Uncompressed);
    assert_eq!(s.file_extension, "");
    assert!(s.warnings.iter().any(|w| w.contains("concatenated")), "{:?}", s.warnings);
    let k = BTreeMap::new();
    let at = Evaluation {
        oldest_arrival: Timestamp::from_millis(1_535_365_800_000),
        time_zone: s.time_zone,
        partition_keys: &k,
        error_output_type: "processing-failed",
    };
    assert_eq!(s.prefixes.data.evaluate(&at).unwrap(), "2018/08/27/10/");
    assert_eq!(s.prefixes.error.evaluate(&at).unwrap(), "processing-failed/2018/08/27/10/");
}

#[test]
fn syntax_errors_say_where() {
    let e = from_json("{\"Prefix\": }").unwrap_err().to_string();
    assert!(e.contains("JSON") && e.contains("line 1"), "{e}");
    let e = from_toml("Prefix = \n").unwrap_err().to_string();
    assert!(e.contains("TOML"), "{e}");
    let e = from_cloudformation_yaml("Resources: [", None).unwrap_err().to_string();
    assert!(e.contains("YAML"), "{e}");
    let e = from_json(r#"{"BufferingHints": {"SizeInMB": 5}}"#).unwrap_err().to_string();
    assert!(e.contains("SizeInMB"), "misspelt nested field named: {e}");
}

/// A prefix whose keys no store accepts fails at start, naming the field, instead of
/// wedging a worker that retries every put for ever.
#[test]
fn prefixes_that_make_no_valid_key_are_refused() {
    for (prefix, error_prefix, words) in [
        ("a/../t=!{partitionKeyFromQuery:t}/", "e/!{firehose:error-output-type}/", "'.' or '..' segment"),
        ("./t=!{partitionKeyFromQuery:t}/", "e/!{firehose:error-output-type}/", "'.' or '..' segment"),
        ("/abs/t=!{partitionKeyFromQuery:t}/", "e/!{firehose:error-output-type}/", "starts with '/'"),
        ("a//t=!{partitionKeyFromQuery:t}/", "e/!{firehose:error-output-type}/", "empty segment"),
        ("t=!{partitionKeyFromQuery:t}/", "e/../!{firehose:error-output-type}/", "'.' or '..' segment"),
    ] {
        let json = format!(
            r#"{{"Prefix": "{prefix}", "ErrorOutputPrefix": "{error_prefix}",
                "DynamicPartitioningConfiguration": {{"Enabled": true}},
                "ProcessingConfiguration": {{"Enabled": true, "Processors": [{{"Type": "MetadataExtraction", "Parameters": [
                  {{"ParameterName": "MetadataExtractionQuery", "ParameterValue": "{{t: .t}}"}},
                  {{"ParameterName": "JsonParsingEngine", "ParameterValue": "JQ-1.6"}}]}}]}}}}"#
        );
        let p = problems(&json);
        let field = if error_prefix.contains("..") { "ErrorOutputPrefix" } else { "Prefix" };
        assert!(
            p.iter()
                .any(|x| x.reason.contains(field) && x.reason.contains(words) && x.reason.contains("no object key")),
            "{prefix} / {error_prefix}: {p:?}"
        );
    }
    // Dots inside a segment are fine.
    let ok = validate(&from_json(
        r#"{"Prefix": "v1.2/a..b/t=!{partitionKeyFromQuery:t}/", "ErrorOutputPrefix": "e/!{firehose:error-output-type}/",
            "DynamicPartitioningConfiguration": {"Enabled": true},
            "ProcessingConfiguration": {"Enabled": true, "Processors": [{"Type": "MetadataExtraction", "Parameters": [
              {"ParameterName": "MetadataExtractionQuery", "ParameterValue": "{t: .t}"},
              {"ParameterName": "JsonParsingEngine", "ParameterValue": "JQ-1.6"}]}]}}"#,
    ).unwrap());
    assert!(ok.is_ok(), "{ok:?}");
}

#[test]
fn cloudwatch_logs_processors() {
    let with = |processors: &str| {
        from_json(&format!(r#"{{"ProcessingConfiguration": {{"Enabled": true, "Processors": [{processors}]}}}}"#))
            .unwrap()
    };
    let s = validate(&with(
        r#"{"Type": "Decompression", "Parameters": [
        {"ParameterName": "CompressionFormat", "ParameterValue": "GZIP"}]},
        {"Type": "CloudWatchLogProcessing", "Parameters": [
        {"ParameterName": "DataMessageExtraction", "ParameterValue": "true"}]},
        {"Type": "AppendDelimiterToRecord"}"#,
    ))
    .unwrap();
    assert_eq!(s.decompression, Some(Decompression { message_extraction: true }));
    let s = validate(&with(r#"{"Type": "Decompression"}"#)).unwrap();
    assert_eq!(s.decompression, Some(Decompression { message_extraction: false }));
    let p = validate(&with(
        r#"{"Type": "Decompression", "Parameters": [
        {"ParameterName": "CompressionFormat", "ParameterValue": "ZSTD"}]},
        {"Type": "CloudWatchLogProcessing", "Parameters": [
        {"ParameterName": "DataMessageExtraction", "ParameterValue": "yes"}]}"#,
    ))
    .unwrap_err();
    assert!(has(&p, "ProcessingConfiguration.Processors[0].CompressionFormat", "GZIP only"), "{p:?}");
    assert!(has(&p, "ProcessingConfiguration.Processors[1].DataMessageExtraction", "not true or false"), "{p:?}");
}

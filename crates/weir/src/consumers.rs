//! The demo's consumers, as config entries built through the registry.

use std::time::Duration;

use crate::config::ConsumerEntry;

/// Consumers of the demo: a counter, a logger, and the archiver with the design
/// note's pipeline writing under `dir`.
pub fn demo_sections(dir: &std::path::Path) -> Vec<ConsumerEntry> {
    vec![
        ConsumerEntry::new("count", "count", serde_json::json!({})),
        ConsumerEntry::new("log", "log", serde_json::json!({})),
        ConsumerEntry::new(
            "archiver",
            "mcp-archive",
            serde_json::json!({
                "directory": dir,
                "mode": "exactly-once",
                "transform": "mcp-normalize",
                "destination": {
                    "Prefix": "tool-events/tenant=!{partitionKeyFromQuery:tenantId}/tool=!{partitionKeyFromQuery:toolName}/year=!{timestamp:yyyy}/month=!{timestamp:MM}/day=!{timestamp:dd}/hour=!{timestamp:HH}/",
                    "ErrorOutputPrefix": "tool-events-errors/!{firehose:error-output-type}/year=!{timestamp:yyyy}/month=!{timestamp:MM}/day=!{timestamp:dd}/",
                    "BufferingHints": { "SizeInMBs": 64, "IntervalInSeconds": DEMO_INTERVAL.as_secs() },
                    "CompressionFormat": "GZIP",
                    "DynamicPartitioningConfiguration": { "Enabled": true },
                    "ProcessingConfiguration": { "Enabled": true, "Processors": [
                        { "Type": "MetadataExtraction", "Parameters": [
                            { "ParameterName": "MetadataExtractionQuery", "ParameterValue": "{tenantId: .tenant_id, toolName: .tool_name}" },
                            { "ParameterName": "JsonParsingEngine", "ParameterValue": "JQ-1.6" } ] } ] }
                }
            }),
        ),
    ]
}

/// The demo archiver's buffer interval.
pub const DEMO_INTERVAL: Duration = Duration::from_secs(2);

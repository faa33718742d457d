//! Building an archiver from its options: buffers, delivery, router and the format
//! conversion's table.

use std::collections::HashMap;
use std::sync::Arc;

use weir_core::Clock;
use weir_core::ports::ObjectSink;

use super::Archiver;
use crate::delivery::body::claim_body;
use crate::delivery::buffers::{Buffers, Limits};
use crate::delivery::claim::Claims;
use crate::delivery::deliver::{Delivery, DeliveryConfig};
use crate::delivery::ledger::Ledger;
use crate::delivery::naming::Naming;
use crate::intake::Conversion;
use crate::options::{ArchiverOptions, BuildError};
use crate::parquet::ParquetFormat;
use crate::pipeline::batch::Router;

impl Archiver {
    /// An archiver writing to `sink`; `clock` gives times for buffers and error records.
    pub fn new(options: ArchiverOptions, sink: Arc<dyn ObjectSink>, clock: Arc<dyn Clock>) -> Result<Self, BuildError> {
        let s = &options.settings;
        let parquet = match &s.conversion {
            None => None,
            Some(c) => {
                let columns = c.columns.clone().ok_or(BuildError::NoColumns)?;
                Some(Arc::new(ParquetFormat::new(columns, c.deserializer.clone(), c.parquet.clone())))
            }
        };
        let limits = Limits {
            size_bytes: s.buffer_bytes,
            interval: s.buffer_interval,
            memory: options.max_buffer_memory,
            max_active: options.max_active_partitions.map(|n| n.max(1)),
            overflow: options.overflow,
            compression: s.compression,
            error_compression: s.error_compression,
            parquet: parquet.clone(),
            level: options.compression_level,
            exact_data: options.transformer.can_change_its_mind(),
        };
        let error_extension = if s.error_compression == s.compression {
            s.file_extension.as_str()
        } else {
            s.error_compression.extension()
        };
        let conversion = parquet.clone().map(|parquet| Conversion {
            parquet,
            catalog_table: s.conversion.as_ref().and_then(|c| {
                let t = &c.table;
                t.table_name.as_ref()?;
                Some(serde_json::json!({
                    "catalogId": t.catalog_id,
                    "databaseName": t.database_name,
                    "tableName": t.table_name,
                    "region": t.region,
                    "versionId": t.version_id.as_deref().unwrap_or("LATEST"),
                }))
            }),
            converted: Vec::new(),
        });
        let delivery = Delivery::new(
            DeliveryConfig {
                consumer: options.name.clone(),
                mode: options.mode,
                naming: Naming::new(&options.name, 1, &s.file_extension),
                error_naming: Naming::new(&options.name, 1, error_extension),
                prefixes: s.prefixes.clone(),
                time_zone: s.time_zone,
                claims: Claims {
                    data: claim_body(s.compression, parquet.clone()),
                    error: claim_body(s.error_compression, None),
                },
                concurrency: options.put_concurrency,
                inline: options.inline_intents,
            },
            sink,
        );
        let buffers = match &options.spill_directory {
            None => Buffers::new(limits),
            Some(dir) => Buffers::new(limits).with_spill(crate::delivery::spill::Spill::open(dir, &options.name)?),
        };
        Ok(Self {
            name: options.name.clone(),
            router: Router::new(s, options.transformer)?,
            buffers,
            ledger: Ledger::default(),
            delivery,
            shards: HashMap::new(),
            clock,
            max_backlog_bytes: options.max_backlog_bytes,
            gauges_at: None,
            zero_interval: s.buffer_interval.is_zero(),
            conversion,
            poisoned: None,
        })
    }
}

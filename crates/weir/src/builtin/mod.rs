//! The built-in consumer kinds, registered through the same [`Plugin`](crate::Plugin)
//! API as any plugin.

mod alerting;
pub(crate) mod archiver;
mod enrichment;
mod iceberg;
mod runtime_kinds;

use crate::plugin::Registry;

/// Registers `count`, `log`, `files`, `archiver`, `alerting`, `enrichment`, `iceberg`
/// and `multilang`.
pub fn register(registry: &mut Registry) {
    registry.register::<weir_runtime::consumers::CountConsumer>("count");
    registry.register::<weir_runtime::consumers::LogConsumer>("log");
    registry.register::<weir_runtime::consumers::FilesConsumer>("files");
    registry.register::<weir_archiver::Archiver>("archiver");
    // An archiver with S3BackupMode Enabled runs a second archiver for the source records.
    registry.companions("archiver", |entry| archiver::backup_entry(entry).into_iter().collect());
    registry.register::<weir_alerting::Alerting>("alerting");
    registry.register::<weir_enrichment::Enricher>("enrichment");
    registry.register::<weir_iceberg::IcebergConsumer>("iceberg");
    registry.register::<crate::multilang::MultiLang>("multilang");
}

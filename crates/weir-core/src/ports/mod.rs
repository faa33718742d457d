//! Ports: the outside world as traits. Implementations live in weir-local (embedded),
//! weir-aws (production) and weir-testkit (fakes); each passes the conformance suite of
//! its port in weir-testkit.

mod functions;
mod lease_table;
mod object_sink;
mod reader;
mod store_location;
mod stream_writer;
mod topics;

pub use functions::{FunctionInvoker, InvokeError};
pub use lease_table::{
    LEASE_FORMAT, LEASE_PARTITIONS, LeaseTable, MAX_LEASE_ITEM_BYTES, MAX_TRANSACTION_BYTES, NamespaceMeta,
    WORKER_PARTITIONS, WorkerHeartbeat, WorkerLoad, lease_item_bytes, lease_partition, lease_partition_key,
    worker_partition, worker_partition_key,
};
pub use object_sink::{ObjectMeta, ObjectSink, PutOptions, PutOutcome, SinkError, validate_key};
pub use reader::{ReadError, ReadMode, ShardInfo, ShardReader, ShardSubscription, StreamCatalog};
pub use store_location::{StoreFieldsError, StoreLocation};
pub use stream_writer::{OutRecord, StreamWriter, WriteError, waves};
pub use topics::{PublishError, Publisher};

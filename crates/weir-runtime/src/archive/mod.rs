//! Replaying from an archive: archived objects as a stream the runtime can lease.

mod key_time;
mod source;

pub use key_time::key_time;
pub use source::{
    ArchiveError, ArchiveSource, ArchivedObject, GROUP_BYTES, GROUP_OBJECTS, Group, TableLines, group_within,
};

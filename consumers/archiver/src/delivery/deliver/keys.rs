//! Object keys: the prefix evaluated for a sealed object's route and oldest arrival,
//! then its name; a key no store accepts falls back to the error prefix.

use std::sync::Arc;

use weir_core::Timestamp;
use weir_firehose::java_time::local_time;
use weir_firehose::prefix::Evaluation;

use super::Delivery;
use crate::delivery::sealed::Sealed;
use crate::pipeline::route::RouteKey;

impl Delivery {
    /// The key of `sealed`, written through `scratch`.
    pub(crate) fn key_for(&self, sealed: &Sealed, scratch: &mut String) -> Arc<str> {
        self.key_into(&sealed.key, sealed.oldest_arrival, scratch);
        Arc::from(scratch.as_str())
    }

    /// The key an object of route `route` whose oldest record arrived at `oldest` gets.
    pub(crate) fn key_at(&self, route: &RouteKey, oldest: Timestamp) -> String {
        let mut key = String::with_capacity(256);
        self.key_into(route, oldest, &mut key);
        key
    }

    /// [`Delivery::key_at`], written into `key` (cleared first).
    fn key_into(&self, route: &RouteKey, oldest: Timestamp, key: &mut String) {
        key.clear();
        let empty = Default::default();
        let (template, kind, naming) = match route.error_type() {
            None => (&self.prefixes.data, "", &self.naming),
            Some(t) => (&self.prefixes.error, t.as_str(), &self.error_naming),
        };
        let e = Evaluation {
            oldest_arrival: oldest,
            time_zone: self.time_zone,
            partition_keys: &empty,
            error_output_type: kind,
        };
        let local = local_time(oldest, self.time_zone);
        let why = match template.evaluate_into(&e, &local, |name| route.value(name), key) {
            Err(err) => err.to_string(),
            Ok(()) => {
                naming.push_name_local(key, &local);
                match weir_core::ports::validate_key(key) {
                    Ok(()) => return,
                    Err(err) => err.to_string(),
                }
            }
        };
        // Values were checked when the records were routed; only the length can still
        // differ (another timestamp, or 512 characters of multi-byte text past the
        // stores' 1,024 bytes). A key no store accepts would be retried forever: fall
        // back to the error prefix.
        tracing::error!(error = %why, "no valid key for a sealed object; using the error prefix");
        key.clear();
        let e = Evaluation { error_output_type: "prefix-evaluation-failed", ..e };
        if self.prefixes.error.evaluate_into(&e, &local, |_| None, key).is_err() {
            key.clear();
        }
        self.error_naming.push_name_local(key, &local);
    }
}

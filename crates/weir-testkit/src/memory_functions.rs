//! An in-memory [`FunctionInvoker`]: functions are closures deployed by name, and can
//! be throttled. Failures carry the codes the Lambda adapter gives them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use weir_core::ports::{FunctionInvoker, InvokeError};

type Handler = Arc<dyn Fn(Bytes) -> Result<Bytes, String> + Send + Sync>;

/// Functions in memory.
#[derive(Default)]
pub struct MemoryFunctions {
    functions: Mutex<BTreeMap<String, Handler>>,
    throttled: Mutex<BTreeSet<String>>,
}

impl std::fmt::Debug for MemoryFunctions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.functions.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect();
        f.debug_struct("MemoryFunctions").field("functions", &names).finish()
    }
}

impl MemoryFunctions {
    /// No functions.
    pub fn new() -> Self {
        Self::default()
    }

    /// Deploys `name` (replacing one of that name): an invocation answers what
    /// `handler` returns for its payload; an `Err` is the function raising, with
    /// that message (`Lambda.FunctionError`).
    pub fn deploy(&self, name: &str, handler: impl Fn(Bytes) -> Result<Bytes, String> + Send + Sync + 'static) {
        self.functions.lock().unwrap_or_else(|p| p.into_inner()).insert(name.to_owned(), Arc::new(handler));
    }

    /// Throttles (or, with `false`, stops throttling) every invocation of `name`
    /// (`Lambda.InvokeLimitExceeded`).
    pub fn throttle(&self, name: &str, throttled: bool) {
        let mut set = self.throttled.lock().unwrap_or_else(|p| p.into_inner());
        if throttled {
            set.insert(name.to_owned());
        } else {
            set.remove(name);
        }
    }
}

#[async_trait]
impl FunctionInvoker for MemoryFunctions {
    async fn invoke(&self, function: &str, payload: Bytes) -> Result<Bytes, InvokeError> {
        if self.throttled.lock().unwrap_or_else(|p| p.into_inner()).contains(function) {
            return Err(InvokeError {
                code: "Lambda.InvokeLimitExceeded",
                message: format!("{function}: rate exceeded"),
                retryable: true,
            });
        }
        let handler = self.functions.lock().unwrap_or_else(|p| p.into_inner()).get(function).cloned();
        let Some(handler) = handler else {
            return Err(InvokeError {
                code: "Lambda.FunctionNotFound",
                message: format!("function not found: {function}"),
                retryable: false,
            });
        };
        handler(payload).map_err(|message| InvokeError {
            code: "Lambda.FunctionError",
            message: format!("function error Unhandled: {message}"),
            retryable: true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::{FunctionHarness, function_invoker_suite};

    struct Harness(Arc<MemoryFunctions>);

    impl FunctionHarness for Harness {
        fn invoker(&self) -> Arc<dyn FunctionInvoker> {
            self.0.clone()
        }
        fn missing(&self) -> String {
            "nothing".into()
        }
    }

    #[tokio::test]
    async fn passes_function_invoker_conformance() {
        let f = Arc::new(MemoryFunctions::new());
        f.deploy("echo", Ok);
        f.deploy("raising", |_| Err("KeyError: 'records'".into()));
        f.deploy("busy", Ok);
        f.throttle("busy", true);
        function_invoker_suite(&Harness(f.clone())).await;
        f.throttle("busy", false);
        assert_eq!(f.invoke("busy", Bytes::from_static(b"{}")).await.unwrap(), "{}", "throttling stops");
    }
}

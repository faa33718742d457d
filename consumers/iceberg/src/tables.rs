//! The tables a consumer writes, and which one each record goes to: one configured
//! table, or the table a jq query names from the record's content (Firehose's
//! routing by JSONQuery expressions, `MetadataExtractionQuery`).
//!
//! A routed record's table is loaded from the catalog the first time a record names
//! it and kept for the consumer's life; a table that does not exist, or has a column
//! type weir does not write, is no table: its records go to the error output with the
//! reason (the worker is never wedged on a name a record made up). A catalog that
//! cannot be reached fails the batch instead: an outage sends nothing to the error
//! output. A query that fails,
//! does not give an object, or gives a name that is not a string sends the record
//! there too. So does an `operation` other than `insert`: updates and deletes need
//! delete files, which the `iceberg` crate weir uses cannot commit.

use std::collections::BTreeMap;
use std::sync::Arc;

use iceberg::{Catalog, ErrorKind, NamespaceIdent, TableIdent};
use jaq_json::Val;
use weir_core::jq::{Filter, FilterError, JsonError};

use crate::schema;
use crate::writer::TableWriter;

/// Why a record has no table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unroutable {
    /// The error record's `errorCode`.
    pub code: &'static str,
    /// The error record's `errorMessage`.
    pub reason: String,
}

impl Unroutable {
    fn new(code: &'static str, reason: impl Into<String>) -> Self {
        Self { code, reason: reason.into() }
    }
}

/// Error code: the routing query failed or gave no usable table name.
pub const ROUTING_FAILED: &str = "Iceberg.RoutingFailed";
/// Error code: the named table is not in the catalog (or cannot be written).
pub const NO_SUCH_TABLE: &str = "Iceberg.NoSuchTable";
/// Error code: the query asked for `update` or `delete`.
pub const UNSUPPORTED_OPERATION: &str = "Iceberg.UnsupportedOperation";
/// Error code: the record does not fit the table's schema.
pub const SCHEMA_MISMATCH: &str = "Iceberg.SchemaMismatch";

/// Firehose's routing query: a jq filter whose single output is an object with
/// `destinationDatabaseName`, `destinationTableName` and optionally `operation`.
#[derive(Debug)]
pub struct RouteQuery {
    filter: Filter,
}

impl RouteQuery {
    /// Compiles `source`.
    pub fn compile(source: &str) -> Result<Self, FilterError> {
        Ok(Self { filter: Filter::compile(source)? })
    }

    /// The database, table and operation `data` names.
    pub fn route(&self, data: &[u8]) -> Result<Route, Unroutable> {
        let input = weir_core::jq::parse(data).map_err(|e| {
            Unroutable::new(
                ROUTING_FAILED,
                match e {
                    JsonError::NotJson => "the record is not one JSON document".to_owned(),
                    JsonError::TooDeep => "the record nests deeper than jq reads".to_owned(),
                },
            )
        })?;
        let out = self.filter.single(input).map_err(|e| Unroutable::new(ROUTING_FAILED, format!("query: {e}")))?;
        let Val::Obj(fields) = &out else {
            return Err(Unroutable::new(ROUTING_FAILED, format!("query gave {out}, not an object")));
        };
        let field = |name: &str| -> Result<Option<String>, Unroutable> {
            match fields.iter().find(|(k, _)| weir_core::jq::key_text(k) == name).map(|(_, v)| v) {
                None | Some(Val::Null) => Ok(None),
                Some(Val::TStr(b) | Val::BStr(b)) if !b.is_empty() => match std::str::from_utf8(b) {
                    Ok(s) => Ok(Some(s.to_owned())),
                    Err(_) => Err(Unroutable::new(ROUTING_FAILED, format!("{name} is not UTF-8"))),
                },
                Some(other) => Err(Unroutable::new(ROUTING_FAILED, format!("{name} is {other}, not a name"))),
            }
        };
        Ok(Route {
            database: field("destinationDatabaseName")?,
            table: field("destinationTableName")?,
            operation: field("operation")?,
        })
    }
}

/// Where a record goes, as a routing query or a transform's `otfMetadata` names it:
/// `destinationDatabaseName`, `destinationTableName`, `operation`; a name left out is
/// the consumer's configured table's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Route {
    /// The table's namespace.
    pub database: Option<String>,
    /// The table's name.
    pub table: Option<String>,
    /// `insert` (or none), `update`, `delete`.
    pub operation: Option<String>,
}

impl Route {
    /// The table, names left out taken from `default`; an `operation` other than
    /// `insert` has none.
    pub fn table(&self, default: Option<&TableIdent>) -> Result<TableIdent, Unroutable> {
        match self.operation.as_deref() {
            None => {}
            Some(op) if op.eq_ignore_ascii_case("insert") => {}
            Some(op) if op.eq_ignore_ascii_case("update") || op.eq_ignore_ascii_case("delete") => {
                return Err(Unroutable::new(
                    UNSUPPORTED_OPERATION,
                    format!("operation {op:?} needs delete files, which weir cannot commit; it appends only"),
                ));
            }
            Some(op) => {
                return Err(Unroutable::new(
                    ROUTING_FAILED,
                    format!("operation {op:?} is not insert, update or delete"),
                ));
            }
        }
        let named = |n: &Option<String>| n.as_deref().filter(|n| !n.is_empty()).map(str::to_owned);
        let database = match named(&self.database) {
            Some(d) => NamespaceIdent::new(d),
            None => default
                .map(|t| t.namespace().clone())
                .ok_or_else(|| Unroutable::new(ROUTING_FAILED, "no destinationDatabaseName"))?,
        };
        let table = match named(&self.table) {
            Some(t) => t,
            None => default
                .map(|t| t.name().to_owned())
                .ok_or_else(|| Unroutable::new(ROUTING_FAILED, "no destinationTableName"))?,
        };
        Ok(TableIdent::new(database, table))
    }
}

/// How records find their table.
#[derive(Debug)]
enum Router {
    /// Every record to the one table.
    Single,
    /// The table a transform names for the record, else the one the query names,
    /// else `default`; names left out are `default`'s.
    Routed { query: Option<RouteQuery>, default: Option<TableIdent> },
}

/// The tables of one consumer, each with its writer; index `0..len()`.
#[derive(Debug)]
pub struct Tables {
    catalog: Arc<dyn Catalog>,
    template: TableWriter,
    router: Router,
    writers: Vec<TableWriter>,
    index: BTreeMap<TableIdent, usize>,
}

impl Tables {
    /// Every record to `writer`'s table.
    pub fn single(writer: TableWriter) -> Self {
        let index = BTreeMap::from([(writer.table().clone(), 0)]);
        Self {
            catalog: writer.catalog(),
            template: writer.clone(),
            router: Router::Single,
            writers: vec![writer],
            index,
        }
    }

    /// Each record to the table its transform names (`otfMetadata`), else the one
    /// `query` names, else `default`, in `template`'s catalog, written with
    /// `template`'s settings (positions name, delivery, attempts). A name the
    /// transform or the query leaves out is `default`'s.
    pub fn routed(template: TableWriter, query: Option<RouteQuery>, default: Option<TableIdent>) -> Self {
        Self {
            catalog: template.catalog(),
            template,
            router: Router::Routed { query, default },
            writers: Vec::new(),
            index: BTreeMap::new(),
        }
    }

    /// The name the tables' positions are kept under (a replay job's own).
    pub fn positions_name(&self) -> &str {
        self.template.consumer()
    }

    /// Whether every record goes to one table.
    pub fn is_single(&self) -> bool {
        matches!(self.router, Router::Single)
    }

    /// The writer of table `i`.
    pub fn writer(&self, i: usize) -> &TableWriter {
        &self.writers[i]
    }

    /// The writers, in index order.
    pub fn writers(&self) -> &[TableWriter] {
        &self.writers
    }

    /// The table of `data` (or the one its transform named, `given`): its index,
    /// loading (and checking) a table met for the first time; `Ok(Err(_))` when the
    /// record fits no table. A consumer of one table ignores `given`. `refused` remembers,
    /// for the caller's batch, names found unwritable, so a run of records naming a
    /// missing table asks the catalog once. A catalog that cannot be reached is an
    /// error (the batch is tried again), never a reason to send records to the error
    /// output.
    pub async fn route(
        &mut self,
        data: &[u8],
        given: Option<&Route>,
        refused: &mut BTreeMap<TableIdent, Unroutable>,
    ) -> Result<Result<usize, Unroutable>, iceberg::Error> {
        let ident = match &self.router {
            Router::Single => return Ok(Ok(0)),
            Router::Routed { query, default } => {
                let route = match (given, query) {
                    (Some(given), _) => Ok(given.clone()),
                    (None, Some(query)) => query.route(data),
                    (None, None) => Ok(Route::default()),
                };
                match route.and_then(|r| r.table(default.as_ref())) {
                    Ok(ident) => ident,
                    Err(why) => return Ok(Err(why)),
                }
            }
        };
        if let Some(&i) = self.index.get(&ident) {
            return Ok(Ok(i));
        }
        if let Some(why) = refused.get(&ident) {
            return Ok(Err(why.clone()));
        }
        let opened = self.open(&ident).await?;
        if let Err(why) = &opened {
            refused.insert(ident, why.clone());
        }
        Ok(opened)
    }

    /// Forgets table `i` (dropped from the catalog since it was opened): a record that
    /// names it again finds out whether it exists again. Returns why its records fit
    /// no table now.
    pub fn forget(&mut self, i: usize) -> Unroutable {
        let ident = self.writers[i].table().clone();
        self.index.remove(&ident);
        Unroutable::new(NO_SUCH_TABLE, format!("table {ident} was dropped from the catalog"))
    }

    async fn open(&mut self, ident: &TableIdent) -> Result<Result<usize, Unroutable>, iceberg::Error> {
        let missing = || Unroutable::new(NO_SUCH_TABLE, format!("no table {ident} in the catalog"));
        if !self.catalog.table_exists(ident).await? {
            return Ok(Err(missing()));
        }
        let table = match self.catalog.load_table(ident).await {
            Ok(t) => t,
            Err(e) if matches!(e.kind(), ErrorKind::TableNotFound | ErrorKind::NamespaceNotFound) => {
                return Ok(Err(missing()));
            }
            Err(e) => return Err(e),
        };
        if let Err(e) = schema::columns(table.metadata().current_schema()) {
            return Ok(Err(Unroutable::new(NO_SUCH_TABLE, format!("table {ident}: {e}"))));
        }
        if let Err(e) = crate::file_properties::file_properties(table.metadata().properties()) {
            return Ok(Err(Unroutable::new(NO_SUCH_TABLE, format!("table {ident}: {e}"))));
        }
        let i = self.writers.len();
        self.writers.push(self.template.for_table(ident.clone()));
        self.index.insert(ident.clone(), i);
        Ok(Ok(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(q: &RouteQuery, data: &[u8], default: Option<&TableIdent>) -> Result<TableIdent, Unroutable> {
        q.route(data).and_then(|r| r.table(default))
    }

    fn t(ns: &str, name: &str) -> TableIdent {
        TableIdent::new(NamespaceIdent::new(ns.into()), name.into())
    }

    #[test]
    fn a_query_names_database_and_table_from_the_record() {
        let q = RouteQuery::compile(r#"{destinationDatabaseName: "mcp", destinationTableName: .toolName}"#).unwrap();
        assert_eq!(at(&q, br#"{"toolName":"search"}"#, None), Ok(t("mcp", "search")));
        let default = t("mcp", "events");
        let q = RouteQuery::compile(r#"{destinationTableName: .toolName, operation: "insert"}"#).unwrap();
        assert_eq!(at(&q, br#"{"toolName":"fetch"}"#, Some(&default)), Ok(t("mcp", "fetch")));
        assert_eq!(at(&q, br#"{"x":1}"#, Some(&default)), Ok(default.clone()), "null name: the default");
    }

    #[test]
    fn what_cannot_be_routed_says_why() {
        let q = RouteQuery::compile(r#"{destinationDatabaseName: "mcp", destinationTableName: .t, operation: .op}"#)
            .unwrap();
        let code = |data: &str| at(&q, data.as_bytes(), None).unwrap_err().code;
        assert_eq!(code(r#"{"op":"update","t":"a"}"#), UNSUPPORTED_OPERATION);
        assert_eq!(code(r#"{"op":"DELETE","t":"a"}"#), UNSUPPORTED_OPERATION);
        assert_eq!(code(r#"{"op":"upsert","t":"a"}"#), ROUTING_FAILED);
        assert_eq!(code(r#"{"t":"a"}{"t":"b"}"#), ROUTING_FAILED, "two documents are not one to route");
        assert_eq!(code(r#"{"t":7}"#), ROUTING_FAILED);
        assert_eq!(code(r#"{"t":""}"#), ROUTING_FAILED);
        assert_eq!(code(r#"{}"#), ROUTING_FAILED);
        assert_eq!(code("not json"), ROUTING_FAILED);
        let q = RouteQuery::compile(".t").unwrap();
        assert!(at(&q, br#"{"t":"a"}"#, None).unwrap_err().reason.contains("not an object"));
        let q = RouteQuery::compile(".[] | {destinationTableName: .}").unwrap();
        assert!(at(&q, br#"["a","b"]"#, Some(&t("x", "y"))).unwrap_err().reason.contains("more than one"));
    }
}

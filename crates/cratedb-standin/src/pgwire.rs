//! CrateDB's PostgreSQL wire protocol endpoint (`psql.port`, 5432), with the `pgwire` crate.
//!
//! Follows "PostgreSQL wire protocol"
//! (<https://cratedb.com/docs/crate/reference/en/latest/interfaces/postgres.html>): protocol
//! v3 on plain TCP (an `SSLRequest` is answered `N`, as CrateDB does without TLS configured),
//! statements in CrateDB's SQL dialect, no transactions (`BEGIN`/`COMMIT` are accepted and do
//! nothing). The command tag of a statement is its first keyword and its row count
//! (`SELECT 3`, `CREATE 1`, `INSERT 0 1`): the stand-in's reading of CrateDB's tags, which the
//! page does not document.
//!
//! Authentication follows "Authentication methods"
//! (<https://cratedb.com/docs/crate/reference/en/latest/admin/auth/methods.html>): with the
//! `password` method the client sends its password in **cleartext** (PostgreSQL's
//! `AuthenticationCleartextPassword`), which is checked against the user's stored hash. As the
//! default host-based configuration does, the superuser `crate` without a password is trusted
//! and asked for none. A wrong password or an unknown user is refused with SQLSTATE `28P01`
//! (`invalid_password`) and CrateDB's `password authentication failed for user "…"`; the
//! password is never echoed or logged.
//!
//! Statements run through the SQL front ([`crate::sql::execute`]) as the logged-in user.
//! Errors become an `ErrorResponse` carrying CrateDB's message and a SQLSTATE chosen from the
//! CrateDB error code (see [`sqlstate`]).
//!
//! Both the simple query protocol (`simple_query`, `batch_execute`) and a minimal extended one
//! (Parse/Bind/Describe/Execute, tokio-postgres' `query`/`execute`) are served. Result
//! columns carry CrateDB's types ([`crate::pgtypes`]), in the text or binary format the client
//! asks for; parameters are `text` unless the client declares another type at Parse time
//! (`int2/4/8`, `float4/8`, `bool` are decoded too). The startup's `database` is the
//! session's default schema (`doc` without one), as CrateDB documents.

use std::fmt::Debug;
use std::net::SocketAddr;
use std::sync::Arc;

use ::pgwire::api::auth::{
    AuthDriver, DefaultServerParameterProvider, StartupHandler, protocol_negotiation,
    save_startup_parameters_to_metadata,
};
use ::pgwire::api::portal::{Format, Portal};
use ::pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use ::pgwire::api::results::{
    DataRowEncoder, DescribePortalResponse, DescribeStatementResponse, FieldFormat, FieldInfo,
    QueryResponse, Response, Tag,
};
use ::pgwire::api::stmt::{QueryParser, StoredStatement};
use ::pgwire::api::store::PortalStore;
use ::pgwire::api::{
    ClientInfo, ClientPortalStore, METADATA_DATABASE, METADATA_USER, PgWireConnectionState,
    PgWireServerHandlers, Type,
};
use ::pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use ::pgwire::messages::startup::Authentication;
use ::pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use async_trait::async_trait;
use futures::{Sink, SinkExt, stream};
use serde_json::Value;
use sqlparser::dialect::GenericDialect;
use sqlparser::tokenizer::{Token, Tokenizer};

use crate::http::Shared;
use crate::model::DataType;
use crate::pgtypes::{Cell, parameter, pg_type};
use crate::sql::{self, ErrorCode, QueryResult, Session, SqlError};

/// The PostgreSQL version CrateDB reports (`server_version`): it emulates 10.5.
pub const SERVER_VERSION: &str = "10.5";

/// The SQLSTATE of a CrateDB error. CrateDB's own mapping is not documented; these are the
/// PostgreSQL codes of the same conditions (a stand-in choice): `42710` duplicate object
/// (user exists), `42P07` duplicate table, `42501` insufficient privilege, `42P01` undefined
/// table, `42703` undefined column, `42704` undefined object (unknown user), `0A000`
/// feature not supported, `XX000` internal error for the rest.
pub fn sqlstate(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::UserExists => "42710",
        ErrorCode::RelationExists => "42P07",
        ErrorCode::MissingPrivilege | ErrorCode::Unauthorized => "42501",
        ErrorCode::UnknownRelation => "42P01",
        ErrorCode::UnknownColumn => "42703",
        ErrorCode::UnknownUser => "42704",
        ErrorCode::Unsupported => "0A000",
        ErrorCode::InvalidSql
        | ErrorCode::NotFound
        | ErrorCode::Internal
        | ErrorCode::ShardsUnavailable => "XX000",
    }
}

fn error(severity: &str, code: &str, message: String) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        severity.to_owned(),
        code.to_owned(),
        message,
    )))
}

fn sql_error(e: &SqlError) -> PgWireError {
    error("ERROR", sqlstate(e.code), e.message.clone())
}

/// The handlers of one node's PostgreSQL endpoint.
struct Backend {
    state: Shared,
    driver: AuthDriver<DefaultServerParameterProvider>,
    parser: Arc<Parser>,
}

fn user_of<C: ClientInfo + ?Sized>(client: &C) -> PgWireResult<String> {
    client
        .metadata()
        .get(METADATA_USER)
        .cloned()
        .ok_or(PgWireError::UserNameRequired)
}

#[async_trait]
impl StartupHandler for Backend {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match message {
            PgWireFrontendMessage::Startup(ref startup) => {
                protocol_negotiation(client, startup).await?;
                save_startup_parameters_to_metadata(client, startup);
                let user = user_of(client)?;
                // `crate` without a password is trusted (no password asked).
                let trusted = self.state.lock().authenticate(&user, None).is_ok();
                if trusted {
                    tracing::debug!(user, "PostgreSQL login (trust)");
                    self.driver.complete_authentication(client, None).await
                } else {
                    client.set_state(PgWireConnectionState::AuthenticationInProgress);
                    client
                        .send(PgWireBackendMessage::Authentication(
                            Authentication::CleartextPassword,
                        ))
                        .await?;
                    Ok(())
                }
            }
            PgWireFrontendMessage::PasswordMessageFamily(message) => {
                let password = message.into_password()?;
                let user = user_of(client)?;
                let outcome = self
                    .state
                    .lock()
                    .authenticate(&user, Some(&password.password))
                    .map(|_| ());
                match outcome {
                    Ok(()) => {
                        tracing::debug!(user, "PostgreSQL login (password)");
                        self.driver.complete_authentication(client, None).await
                    }
                    Err(e) => {
                        tracing::info!(user, "PostgreSQL authentication failed");
                        // The model's message names the user, never the password.
                        Err(error("FATAL", "28P01", e.to_string()))
                    }
                }
            }
            _ => Ok(()),
        }
    }
}

/// Splits a simple query's text into statements at `;` outside quotes and comments.
pub(crate) fn split_statements(sql: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let bytes = sql.as_bytes();
    let (mut start, mut i) = (0, 0);
    let mut quote: Option<u8> = None;
    while i < bytes.len() {
        let b = bytes[i];
        match quote {
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None if b == b'\'' || b == b'"' => quote = Some(b),
            None if b == b'-' && bytes.get(i + 1) == Some(&b'-') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            None if b == b';' => {
                out.push(&sql[start..i]);
                start = i + 1;
            }
            None => {}
        }
        i += 1;
    }
    out.push(&sql[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|s| !s.is_empty() && !s.starts_with("--"))
        .collect()
}

/// The command tag CrateDB sends: the statement's keyword and its row count.
fn tag(result: &QueryResult) -> Tag {
    match result.kind {
        "INSERT" => Tag::new(&format!("INSERT 0 {}", result.rowcount)),
        "BEGIN" | "COMMIT" => Tag::new(result.kind),
        kind => Tag::new(&format!("{kind} {}", result.rowcount)),
    }
}

fn fields(cols: &[String], types: &[DataType], format: Option<&Format>) -> Vec<FieldInfo> {
    cols.iter()
        .enumerate()
        .map(|(i, c)| {
            let f = format.map_or(FieldFormat::Text, |f| f.format_for(i));
            let ty = types.get(i).unwrap_or(&DataType::Undefined);
            FieldInfo::new(c.clone(), None, None, pg_type(ty), f)
        })
        .collect()
}

/// A statement's answer: rows with a `SELECT n` tag, or only a tag.
fn response(result: QueryResult, schema: Vec<FieldInfo>) -> Response {
    if result.kind != "SELECT" {
        return Response::Execution(tag(&result));
    }
    let schema = Arc::new(schema);
    let mut encoder = DataRowEncoder::new(schema.clone());
    let rows: Vec<PgWireResult<_>> = result
        .rows
        .iter()
        .map(|row| {
            for (i, value) in row.iter().enumerate() {
                let ty = result.types.get(i).unwrap_or(&DataType::Undefined);
                encoder.encode_field(&Cell { ty, value })?;
            }
            Ok(encoder.take_row())
        })
        .collect();
    // pgwire appends the row count to the `SELECT` tag itself.
    Response::Query(QueryResponse::new(schema, stream::iter(rows)))
}

impl Backend {
    async fn run(
        &self,
        session: &Session,
        stmt: &str,
        args: &[Value],
    ) -> Result<QueryResult, SqlError> {
        self.state.execute_in(session, stmt, args).await
    }
}

/// The session of a connection: its user, and its `database` as the default schema.
fn session_of<C: ClientInfo + ?Sized>(client: &C) -> PgWireResult<Session> {
    let user = user_of(client)?;
    let database = client.metadata().get(METADATA_DATABASE).cloned();
    Ok(Session::new(user, database.as_deref()))
}

#[async_trait]
impl SimpleQueryHandler for Backend {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = session_of(client)?;
        let mut out = Vec::new();
        for stmt in split_statements(query) {
            match self.run(&session, stmt, &[]).await {
                Ok(r) => {
                    let schema = fields(&r.cols, &r.types, None);
                    out.push(response(r, schema));
                }
                Err(e) => {
                    // Later statements of the batch are not run, as PostgreSQL does.
                    out.push(Response::Error(Box::new(sql_error(&e).into())));
                    break;
                }
            }
        }
        if out.is_empty() {
            out.push(Response::EmptyQuery);
        }
        Ok(out)
    }
}

/// A statement of the extended protocol: its text, the number of its placeholders and, for a
/// query, its columns and their types (found at Parse time by running it with NULL
/// parameters; a portal's Describe runs it again with the bound parameters).
#[derive(Debug, Clone)]
pub struct Prepared {
    sql: String,
    params: usize,
    cols: Option<Columns>,
}

/// A query's column names and types.
type Columns = (Vec<String>, Vec<DataType>);

/// The number of `?` and `$n` placeholders of a statement.
fn placeholders(sql: &str) -> Result<usize, SqlError> {
    let tokens = Tokenizer::new(&GenericDialect {}, sql)
        .tokenize()
        .map_err(SqlError::parse)?;
    let (mut question, mut numbered) = (0usize, 0usize);
    for t in tokens {
        if let Token::Placeholder(p) = t {
            if p == "?" {
                question += 1;
            } else if let Some(n) = p.strip_prefix('$').and_then(|n| n.parse().ok()) {
                numbered = numbered.max(n);
            }
        }
    }
    Ok(question.max(numbered))
}

struct Parser {
    state: Shared,
}

#[async_trait]
impl QueryParser for Parser {
    type Statement = Prepared;

    async fn parse_sql<C>(
        &self,
        client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Prepared>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let params = placeholders(sql).map_err(|e| sql_error(&e))?;
        let nulls = vec![Value::Null; params];
        let session = session_of(client)?;
        let cols = query_columns(&self.state, &session, sql, &nulls).map_err(|e| sql_error(&e))?;
        Ok(Some(Prepared {
            sql: sql.to_owned(),
            params,
            cols,
        }))
    }

    fn get_parameter_types(&self, stmt: &Prepared) -> PgWireResult<Vec<Type>> {
        Ok(vec![Type::TEXT; stmt.params])
    }

    fn get_result_schema(
        &self,
        stmt: &Prepared,
        format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        Ok(stmt
            .cols
            .as_ref()
            .map(|(c, t)| fields(c, t, format))
            .unwrap_or_default())
    }
}

/// The columns and types of `sql` when it is a query (run once, it has no side effects).
fn query_columns(
    state: &Shared,
    session: &Session,
    sql: &str,
    args: &[Value],
) -> Result<Option<Columns>, SqlError> {
    let parsed = sql::parse_in(sql, args, &session.schema)?;
    if !matches!(parsed, sql::Statement::Query(_)) {
        return Ok(None);
    }
    let mut cluster = state.lock();
    let r = sql::execute_in(&mut cluster, session, sql, args)?;
    Ok(Some((r.cols, r.types)))
}

#[async_trait]
impl ExtendedQueryHandler for Backend {
    type Statement = Prepared;
    type QueryParser = Parser;

    fn query_parser(&self) -> Arc<Parser> {
        self.parser.clone()
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Prepared>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = session_of(client)?;
        let args = (0..portal.parameter_len())
            .map(|i| parameter(portal, i))
            .collect::<PgWireResult<Vec<_>>>()?;
        let stmt = &portal.statement.statement;
        let result = self
            .run(&session, &stmt.sql, &args)
            .await
            .map_err(|e| sql_error(&e))?;
        let schema = fields(
            &result.cols,
            &result.types,
            Some(&portal.result_column_format),
        );
        Ok(response(result, schema))
    }

    async fn do_describe_statement<C>(
        &self,
        _client: &mut C,
        target: &StoredStatement<Prepared>,
    ) -> PgWireResult<DescribeStatementResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let stmt = &target.statement;
        let types = (0..stmt.params)
            .map(|i| {
                target
                    .parameter_types
                    .get(i)
                    .cloned()
                    .flatten()
                    .unwrap_or(Type::TEXT)
            })
            .collect();
        let schema = self.parser.get_result_schema(stmt, None)?;
        Ok(DescribeStatementResponse::new(types, schema))
    }

    async fn do_describe_portal<C>(
        &self,
        client: &mut C,
        target: &Portal<Prepared>,
    ) -> PgWireResult<DescribePortalResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let stmt = &target.statement.statement;
        if stmt.cols.is_none() {
            return Ok(DescribePortalResponse::new(Vec::new()));
        }
        // With the bound parameters, the types are those the Execute answers with.
        let args = (0..target.parameter_len())
            .map(|i| parameter(target, i))
            .collect::<PgWireResult<Vec<_>>>()?;
        let session = session_of(client)?;
        let cols = query_columns(&self.state, &session, &stmt.sql, &args)
            .map_err(|e| sql_error(&e))?
            .unwrap_or_default();
        let format = Some(&target.result_column_format);
        Ok(DescribePortalResponse::new(fields(
            &cols.0, &cols.1, format,
        )))
    }
}

struct Handlers(Arc<Backend>);

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.0.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.0.clone()
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        self.0.clone()
    }
}

fn handlers(state: Shared) -> Arc<Handlers> {
    let mut params = DefaultServerParameterProvider::default();
    params.server_version = SERVER_VERSION.to_owned();
    params.is_superuser = false;
    Arc::new(Handlers(Arc::new(Backend {
        state: state.clone(),
        driver: AuthDriver::new(params),
        parser: Arc::new(Parser { state }),
    })))
}

/// Accepts PostgreSQL connections on `listener` until it fails or the node stops; each
/// connection runs on its own task and ends when the node stops.
pub async fn serve(listener: tokio::net::TcpListener, state: Shared) -> std::io::Result<()> {
    let handlers = handlers(state.clone());
    loop {
        let (socket, peer): (_, SocketAddr) = tokio::select! {
            accepted = listener.accept() => accepted?,
            _ = state.stopped() => return Ok(()),
        };
        let handlers = handlers.clone();
        let state = state.clone();
        tokio::spawn(async move {
            tokio::select! {
                r = ::pgwire::tokio::process_socket(socket, None, handlers) => {
                    if let Err(e) = r {
                        tracing::debug!(%peer, error = %e, "PostgreSQL connection ended");
                    }
                }
                _ = state.stopped() => {}
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_statements_outside_quotes() {
        assert_eq!(
            split_statements("CREATE USER a WITH (password = 'x;y'); SELECT \";\" ;; -- c"),
            vec!["CREATE USER a WITH (password = 'x;y')", "SELECT \";\""]
        );
        assert!(split_statements(" ; ").is_empty());
    }

    #[test]
    fn counts_placeholders() {
        assert_eq!(placeholders("SELECT ? , ?").ok(), Some(2));
        assert_eq!(placeholders("SELECT $2, $1").ok(), Some(2));
        assert_eq!(placeholders("SELECT '$1'").ok(), Some(0));
    }

    #[test]
    fn maps_codes_to_sqlstates() {
        assert_eq!(sqlstate(ErrorCode::UserExists), "42710");
        assert_eq!(sqlstate(ErrorCode::MissingPrivilege), "42501");
        assert_eq!(sqlstate(ErrorCode::Internal), "XX000");
    }
}

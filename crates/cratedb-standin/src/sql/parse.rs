//! Parsing: CrateDB's own statements by hand over `sqlparser`'s tokenizer, everything else
//! (`SELECT`, `INSERT`, `UPDATE`) by `sqlparser` with its generic dialect.
//!
//! Hand-matched, following CrateDB's SQL reference
//! (<https://cratedb.com/docs/crate/reference/en/latest/sql/statements/index.html>):
//! `CREATE USER name [WITH] (password = …)` and its unparenthesised forms, `ALTER USER name
//! SET (password = …)`, `DROP USER [IF EXISTS]`, `GRANT`/`REVOKE` of `ALL [PRIVILEGES]`, `DQL`,
//! `DML`, `DDL`, `AL` at cluster level, `SET GLOBAL [PERSISTENT | TRANSIENT] key = value, …`
//! (transient by default), `RESET GLOBAL key, …`, `SET LICENSE '…'`, `CREATE TABLE … [CLUSTERED
//! [BY (col)] INTO n SHARDS] [WITH (number_of_replicas = …)]`, `ALTER TABLE t SET
//! (number_of_replicas = …)`, `DROP TABLE`, and `BEGIN` / `COMMIT` / session `SET` as no-ops.

use std::fmt;

use serde_json::Value;
use sqlparser::ast;
use sqlparser::dialect::GenericDialect;
use sqlparser::keywords::Keyword;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, Tokenizer};

use super::error::SqlError;
use crate::model::{DataType, Privilege, Replicas, TableName};

/// A password from a statement. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// A parsed statement.
#[derive(Debug, Clone, PartialEq)]
pub enum Statement {
    CreateUser {
        name: String,
        password: Option<Secret>,
    },
    AlterUserPassword {
        name: String,
        password: Option<Secret>,
    },
    DropUser {
        name: String,
        if_exists: bool,
    },
    Grant {
        privileges: Vec<Privilege>,
        users: Vec<String>,
        revoke: bool,
    },
    SetGlobal {
        persistent: bool,
        settings: Vec<(String, Value)>,
    },
    ResetGlobal {
        keys: Vec<String>,
    },
    SetLicense {
        key: Secret,
    },
    CreateTable {
        name: TableName,
        if_not_exists: bool,
        shards: Option<u32>,
        replicas: Option<Replicas>,
        columns: Vec<(String, DataType)>,
    },
    AlterTableReplicas {
        name: TableName,
        replicas: Replicas,
    },
    DropTable {
        name: TableName,
        if_exists: bool,
    },
    /// `REFRESH TABLE t [, …]`: rows are visible at once in the stand-in, so it only checks
    /// that the tables exist.
    Refresh {
        tables: Vec<TableName>,
    },
    /// `BEGIN`, `COMMIT`, session `SET`: accepted, no effect (CrateDB has no transactions).
    NoOp(&'static str),
    Query(Box<ast::Query>),
    Insert(Box<ast::Insert>),
    Update(Box<ast::Update>),
    Delete(Box<ast::Delete>),
}

impl Statement {
    /// The word CrateDB's clients (crash) show for a statement: `CREATE`, `SELECT`, ….
    pub fn kind(&self) -> &'static str {
        match self {
            Statement::CreateUser { .. } | Statement::CreateTable { .. } => "CREATE",
            Statement::AlterUserPassword { .. } | Statement::AlterTableReplicas { .. } => "ALTER",
            Statement::DropUser { .. } | Statement::DropTable { .. } => "DROP",
            Statement::Grant { revoke: false, .. } => "GRANT",
            Statement::Grant { revoke: true, .. } => "REVOKE",
            Statement::SetGlobal { .. } | Statement::SetLicense { .. } => "SET",
            Statement::ResetGlobal { .. } => "RESET",
            Statement::Refresh { .. } => "REFRESH",
            Statement::Delete(_) => "DELETE",
            Statement::NoOp(kind) => kind,
            Statement::Query(_) => "SELECT",
            Statement::Insert(_) => "INSERT",
            Statement::Update(_) => "UPDATE",
        }
    }
}

/// Parses one statement; `?` and `$n` placeholders take their values from `args`. Unqualified
/// table names are in the schema `doc`.
pub fn parse(sql: &str, args: &[Value]) -> Result<Statement, SqlError> {
    parse_in(sql, args, "doc")
}

/// [`parse`] with `schema` as the session's default schema (the HTTP `Default-Schema` header,
/// the PostgreSQL `database`): unqualified table names of CrateDB's own statements are in it.
pub fn parse_in(sql: &str, args: &[Value], schema: &str) -> Result<Statement, SqlError> {
    let dialect = GenericDialect {};
    let raw = Tokenizer::new(&dialect, sql)
        .tokenize()
        .map_err(SqlError::parse)?;
    // Number `?` placeholders so every later stage sees `$n`.
    let mut n = 0;
    let tokens: Vec<Token> = raw
        .into_iter()
        .map(|t| match t {
            Token::Placeholder(p) if p == "?" => {
                n += 1;
                Token::Placeholder(format!("${n}"))
            }
            t => t,
        })
        .collect();
    let mut c = Cursor {
        toks: tokens
            .iter()
            .filter(|t| !matches!(t, Token::Whitespace(_)))
            .cloned()
            .collect(),
        pos: 0,
        args,
        schema,
    };
    if let Some(stmt) = c.crate_statement()? {
        c.end()?;
        return Ok(stmt);
    }
    let rewritten = c.show_statement()?;
    let text: String = match rewritten {
        Some(query) => query,
        None => tokens.iter().map(ToString::to_string).collect(),
    };
    let mut parsed = Parser::parse_sql(&dialect, &text).map_err(SqlError::parse)?;
    if parsed.len() != 1 {
        return Err(SqlError::parse("expected exactly one statement"));
    }
    match parsed.remove(0) {
        ast::Statement::Query(q) => Ok(Statement::Query(q)),
        ast::Statement::Insert(i) => Ok(Statement::Insert(Box::new(i))),
        ast::Statement::Update(u) => Ok(Statement::Update(Box::new(u))),
        ast::Statement::Delete(d) => Ok(Statement::Delete(Box::new(d))),
        other => Err(SqlError::unsupported(format!(
            "statement not supported by the stand-in: {}",
            first_words(&other)
        ))),
    }
}

fn first_words(stmt: &ast::Statement) -> String {
    stmt.to_string()
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Resolves a `$n` placeholder.
pub(crate) fn placeholder(p: &str, args: &[Value]) -> Result<Value, SqlError> {
    let idx: usize = p
        .trim_start_matches('$')
        .parse()
        .map_err(|_| SqlError::parse(format!("bad parameter {p}")))?;
    args.get(idx.wrapping_sub(1))
        .cloned()
        .ok_or_else(|| SqlError::parse(format!("The query contains a parameter placeholder ${idx}, but there are only {} parameter values", args.len())))
}

pub(super) struct Cursor<'a> {
    pub(super) toks: Vec<Token>,
    pub(super) pos: usize,
    pub(super) args: &'a [Value],
    /// The session's default schema.
    pub(super) schema: &'a str,
}

impl Cursor<'_> {
    pub(super) fn peek(&self) -> Option<&Token> {
        self.toks.get(self.pos)
    }

    pub(super) fn next(&mut self) -> Option<Token> {
        let t = self.toks.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    pub(super) fn word_at(&self, i: usize) -> Option<String> {
        match self.toks.get(self.pos + i) {
            Some(Token::Word(w)) if w.quote_style.is_none() => Some(w.value.to_ascii_uppercase()),
            _ => None,
        }
    }

    pub(super) fn keyword(&mut self, kw: &str) -> bool {
        if self.word_at(0).as_deref() == Some(kw) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    pub(super) fn keywords(&mut self, kws: &[&str]) -> bool {
        if kws
            .iter()
            .enumerate()
            .all(|(i, k)| self.word_at(i).as_deref() == Some(*k))
        {
            self.pos += kws.len();
            true
        } else {
            false
        }
    }

    pub(super) fn expect_keyword(&mut self, kw: &str) -> Result<(), SqlError> {
        if self.keyword(kw) {
            Ok(())
        } else {
            Err(self.unexpected(kw))
        }
    }

    pub(super) fn token(&mut self, t: &Token) -> bool {
        if self.peek() == Some(t) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    pub(super) fn expect_token(&mut self, t: &Token) -> Result<(), SqlError> {
        if self.token(t) {
            Ok(())
        } else {
            Err(self.unexpected(&t.to_string()))
        }
    }

    pub(super) fn unexpected(&self, wanted: &str) -> SqlError {
        match self.peek() {
            Some(t) => SqlError::parse(format!("line 1: expected {wanted}, found '{t}'")),
            None => SqlError::parse(format!("line 1: expected {wanted}, found end of input")),
        }
    }

    pub(super) fn end(&mut self) -> Result<(), SqlError> {
        while self.token(&Token::SemiColon) {}
        match self.peek() {
            None | Some(Token::EOF) => Ok(()),
            Some(_) => Err(self.unexpected("end of statement")),
        }
    }

    /// An identifier: unquoted ones are folded to lower case, as CrateDB does.
    pub(super) fn ident(&mut self) -> Result<String, SqlError> {
        match self.next() {
            Some(Token::Word(w)) if w.quote_style.is_some() => Ok(w.value),
            Some(Token::Word(w)) => Ok(w.value.to_lowercase()),
            _ => {
                self.pos -= 1;
                Err(self.unexpected("an identifier"))
            }
        }
    }

    pub(super) fn table_name(&mut self) -> Result<TableName, SqlError> {
        let first = self.ident()?;
        if self.token(&Token::Period) {
            Ok(TableName::new(first, self.ident()?))
        } else {
            Ok(TableName::new(self.schema, first))
        }
    }

    /// A setting name: `"a.b.c"` or `a.b.c`.
    fn setting_name(&mut self) -> Result<String, SqlError> {
        let mut parts = vec![self.ident()?];
        while self.token(&Token::Period) {
            parts.push(self.ident()?);
        }
        Ok(parts.join("."))
    }

    pub(super) fn literal(&mut self) -> Result<Value, SqlError> {
        let negative = self.token(&Token::Minus);
        let value = match self.next() {
            Some(Token::SingleQuotedString(s)) => Value::String(s),
            Some(Token::DollarQuotedString(s)) => Value::String(s.value),
            Some(Token::Number(n, _)) => number(&n)?,
            Some(Token::Placeholder(p)) => placeholder(&p, self.args)?,
            Some(Token::Word(w)) if w.quote_style.is_none() && w.keyword == Keyword::TRUE => {
                Value::Bool(true)
            }
            Some(Token::Word(w)) if w.quote_style.is_none() && w.keyword == Keyword::FALSE => {
                Value::Bool(false)
            }
            Some(Token::Word(w)) if w.quote_style.is_none() && w.keyword == Keyword::NULL => {
                Value::Null
            }
            _ => {
                self.pos -= 1;
                return Err(self.unexpected("a literal"));
            }
        };
        match (negative, value) {
            (true, Value::Number(n)) => n
                .as_i64()
                .map(|i| Value::from(-i))
                .or_else(|| n.as_f64().map(|f| Value::from(-f)))
                .ok_or_else(|| SqlError::parse("bad number")),
            (true, _) => Err(SqlError::parse("'-' before a non-number")),
            (false, v) => Ok(v),
        }
    }

    /// `key = value [, …]` inside or outside parentheses.
    pub(super) fn assignments(&mut self) -> Result<Vec<(String, Value)>, SqlError> {
        let paren = self.token(&Token::LParen);
        let mut out = Vec::new();
        loop {
            let key = self.setting_name()?;
            // CREATE USER also accepts `password 'x'` without `=`.
            self.token(&Token::Eq);
            out.push((key, self.literal()?));
            if !self.token(&Token::Comma) {
                break;
            }
        }
        if paren {
            self.expect_token(&Token::RParen)?;
        }
        Ok(out)
    }

    fn password_of(&self, params: Vec<(String, Value)>) -> Result<Option<Secret>, SqlError> {
        let mut password = None;
        for (k, v) in params {
            match (k.as_str(), v) {
                ("password", Value::String(s)) => password = Some(Secret(s)),
                ("password", Value::Null) => password = None,
                ("password", _) => {
                    return Err(SqlError::parse("password must be a string literal"));
                }
                (other, _) => {
                    return Err(SqlError::unsupported(format!("user parameter '{other}'")));
                }
            }
        }
        Ok(password)
    }

    fn crate_statement(&mut self) -> Result<Option<Statement>, SqlError> {
        if self.keywords(&["CREATE", "USER"]) {
            let name = self.ident()?;
            let params = if self.keyword("WITH")
                || self.word_at(0).is_some()
                || self.peek() == Some(&Token::LParen)
            {
                self.assignments()?
            } else {
                Vec::new()
            };
            return Ok(Some(Statement::CreateUser {
                name,
                password: self.password_of(params)?,
            }));
        }
        if self.keywords(&["ALTER", "USER"]) {
            let name = self.ident()?;
            self.expect_keyword("SET")?;
            let params = self.assignments()?;
            return Ok(Some(Statement::AlterUserPassword {
                name,
                password: self.password_of(params)?,
            }));
        }
        if self.keywords(&["DROP", "USER"]) {
            let if_exists = self.keywords(&["IF", "EXISTS"]);
            return Ok(Some(Statement::DropUser {
                name: self.ident()?,
                if_exists,
            }));
        }
        if self.word_at(0).as_deref() == Some("GRANT")
            || self.word_at(0).as_deref() == Some("REVOKE")
        {
            let revoke = self.keyword("REVOKE");
            if !revoke {
                self.keyword("GRANT");
            }
            let privileges = self.privileges()?;
            if self.keyword("ON") {
                return Err(SqlError::unsupported("privileges on schemas or tables"));
            }
            self.expect_keyword(if revoke { "FROM" } else { "TO" })?;
            let mut users = vec![self.ident()?];
            while self.token(&Token::Comma) {
                users.push(self.ident()?);
            }
            return Ok(Some(Statement::Grant {
                privileges,
                users,
                revoke,
            }));
        }
        if self.keywords(&["SET", "GLOBAL"]) {
            let persistent = self.keyword("PERSISTENT");
            if !persistent {
                self.keyword("TRANSIENT");
            }
            let mut settings = Vec::new();
            loop {
                let key = self.setting_name()?;
                if !self.token(&Token::Eq) {
                    self.expect_keyword("TO")?;
                }
                settings.push((key, self.literal()?));
                if !self.token(&Token::Comma) {
                    break;
                }
            }
            return Ok(Some(Statement::SetGlobal {
                persistent,
                settings,
            }));
        }
        if self.keywords(&["RESET", "GLOBAL"]) {
            let mut keys = vec![self.setting_name()?];
            while self.token(&Token::Comma) {
                keys.push(self.setting_name()?);
            }
            return Ok(Some(Statement::ResetGlobal { keys }));
        }
        if self.keywords(&["SET", "LICENSE"]) {
            return match self.literal()? {
                Value::String(key) => Ok(Some(Statement::SetLicense { key: Secret(key) })),
                _ => Err(SqlError::parse("the license key must be a string literal")),
            };
        }
        if self.keywords(&["CREATE", "TABLE"]) {
            return self.create_table().map(Some);
        }
        if self.keywords(&["REFRESH", "TABLE"]) {
            let mut tables = vec![self.table_name()?];
            while self.token(&Token::Comma) {
                tables.push(self.table_name()?);
            }
            return Ok(Some(Statement::Refresh { tables }));
        }
        if self.keywords(&["ALTER", "TABLE"]) {
            let name = self.table_name()?;
            self.expect_keyword("SET")?;
            let mut replicas = None;
            for (k, v) in self.assignments()? {
                match k.as_str() {
                    "number_of_replicas" => replicas = Some(replicas_of(&v)?),
                    other => return Err(SqlError::unsupported(format!("table setting '{other}'"))),
                }
            }
            let replicas =
                replicas.ok_or_else(|| SqlError::parse("expected number_of_replicas"))?;
            return Ok(Some(Statement::AlterTableReplicas { name, replicas }));
        }
        if self.keywords(&["DROP", "TABLE"]) {
            let if_exists = self.keywords(&["IF", "EXISTS"]);
            return Ok(Some(Statement::DropTable {
                name: self.table_name()?,
                if_exists,
            }));
        }
        for (kw, kind) in [
            ("BEGIN", "BEGIN"),
            ("START", "BEGIN"),
            ("COMMIT", "COMMIT"),
            ("END", "COMMIT"),
        ] {
            if self.keyword(kw) {
                self.pos = self.toks.len();
                return Ok(Some(Statement::NoOp(kind)));
            }
        }
        if self.word_at(0).as_deref() == Some("SET") {
            self.pos = self.toks.len();
            return Ok(Some(Statement::NoOp("SET")));
        }
        Ok(None)
    }

    fn privileges(&mut self) -> Result<Vec<Privilege>, SqlError> {
        if self.keyword("ALL") {
            self.keyword("PRIVILEGES");
            return Ok(Privilege::ALL.to_vec());
        }
        let mut out = Vec::new();
        loop {
            let word = self
                .word_at(0)
                .ok_or_else(|| self.unexpected("a privilege"))?;
            let p = Privilege::parse(&word)
                .ok_or_else(|| SqlError::parse(format!("Unknown privilege type '{word}'")))?;
            self.pos += 1;
            out.push(p);
            if !self.token(&Token::Comma) {
                return Ok(out);
            }
        }
    }
}

pub(super) fn number(text: &str) -> Result<Value, SqlError> {
    if let Ok(i) = text.parse::<i64>() {
        return Ok(Value::from(i));
    }
    text.parse::<f64>()
        .map(Value::from)
        .map_err(|_| SqlError::parse(format!("bad number {text}")))
}

pub(super) fn replicas_of(v: &Value) -> Result<Replicas, SqlError> {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => {
            return Err(SqlError::parse(
                "number_of_replicas must be a number or a range",
            ));
        }
    };
    Replicas::parse(&text).map_err(SqlError::from)
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;

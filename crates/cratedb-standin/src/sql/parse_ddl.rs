//! CrateDB's table statements, hand-matched: `CREATE TABLE` with its column types, and the
//! `SHOW` statements, rewritten into the `information_schema` queries the documentation says
//! they equal (`sql/statements/show-tables.html`, `show-schemas.html`, `show-columns.html`).

use serde_json::Value;
use sqlparser::keywords::Keyword;
use sqlparser::tokenizer::Token;

use super::error::SqlError;
use super::parse::{Cursor, Statement, replicas_of};
use crate::model::DataType;

/// Words that end a column's type in a column definition.
const AFTER_TYPE: &[&str] = &[
    "PRIMARY",
    "NOT",
    "NULL",
    "DEFAULT",
    "INDEX",
    "GENERATED",
    "AS",
    "CHECK",
    "CONSTRAINT",
    "STORAGE",
];

/// Systems schemas `SHOW TABLES` leaves out unless asked for.
const SYSTEM_SCHEMAS: &str = "'sys', 'information_schema', 'pg_catalog', 'blob'";

fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

impl Cursor<'_> {
    /// The type after a column's name, up to a constraint, a `,` or the closing `)`. Types the
    /// stand-in does not know are `undefined`.
    fn column_type(&mut self) -> DataType {
        let mut text = String::new();
        let mut depth = 0usize;
        while let Some(t) = self.peek() {
            match t {
                Token::Comma | Token::RParen if depth == 0 => break,
                Token::Word(w)
                    if depth == 0
                        && w.quote_style.is_none()
                        && AFTER_TYPE.contains(&w.value.to_ascii_uppercase().as_str()) =>
                {
                    break;
                }
                Token::LParen => depth += 1,
                Token::RParen => depth -= 1,
                _ => {}
            }
            match t {
                Token::Word(w) => {
                    text.push(' ');
                    text.push_str(&w.value);
                }
                other => text.push_str(&other.to_string()),
            }
            self.pos += 1;
        }
        DataType::from_sql(text.trim()).unwrap_or(DataType::Undefined)
    }

    /// Skips the rest of a column definition or constraint up to its `,` or the closing `)`
    /// of the column list (not consumed).
    fn skip_element(&mut self) {
        let mut depth = 0usize;
        while let Some(t) = self.peek() {
            match t {
                Token::Comma | Token::RParen if depth == 0 => break,
                Token::LParen => depth += 1,
                Token::RParen => depth -= 1,
                _ => {}
            }
            self.pos += 1;
        }
    }

    /// The rest of the statement as SQL text (`LIKE` / `WHERE` clauses of `SHOW`).
    fn rest(&mut self) -> String {
        let mut out = Vec::new();
        while let Some(t) = self.next() {
            if matches!(t, Token::EOF | Token::SemiColon) {
                break;
            }
            out.push(t.to_string());
        }
        out.join(" ")
    }

    /// `[LIKE 'pattern' | WHERE expression]` on `column`, as an `AND …` condition.
    fn show_filter(&mut self, column: &str) -> Result<String, SqlError> {
        if self.keyword("LIKE") {
            return match self.literal()? {
                Value::String(p) => Ok(format!(" AND {column} LIKE {}", quoted(&p))),
                _ => Err(SqlError::parse("LIKE needs a string pattern")),
            };
        }
        if self.keyword("WHERE") {
            return Ok(format!(" AND ({})", self.rest()));
        }
        Ok(String::new())
    }

    /// `SHOW TABLES`, `SHOW SCHEMAS`, `SHOW COLUMNS` as the query each equals.
    pub(super) fn show_statement(&mut self) -> Result<Option<String>, SqlError> {
        if self.keywords(&["SHOW", "TABLES"]) {
            let schema = if self.keyword("FROM") || self.keyword("IN") {
                format!("table_schema = {}", quoted(&self.ident()?))
            } else {
                format!("table_schema NOT IN ({SYSTEM_SCHEMAS})")
            };
            let filter = self.show_filter("table_name")?;
            self.end()?;
            return Ok(Some(format!(
                "SELECT table_name FROM information_schema.tables WHERE {schema}{filter} ORDER BY table_name"
            )));
        }
        if self.keywords(&["SHOW", "SCHEMAS"]) {
            let filter = self.show_filter("schema_name")?;
            self.end()?;
            return Ok(Some(format!(
                "SELECT schema_name FROM information_schema.schemata WHERE true{filter} ORDER BY schema_name"
            )));
        }
        if self.keywords(&["SHOW", "COLUMNS"]) {
            if !(self.keyword("FROM") || self.keyword("IN")) {
                return Err(self.unexpected("FROM"));
            }
            let table = self.table_name()?;
            let schema = if self.keyword("FROM") || self.keyword("IN") {
                self.ident()?
            } else {
                table.schema.clone()
            };
            let filter = self.show_filter("column_name")?;
            self.end()?;
            return Ok(Some(format!(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = {} AND table_name = {}{filter} ORDER BY column_name",
                quoted(&schema),
                quoted(&table.name)
            )));
        }
        Ok(None)
    }

    pub(super) fn create_table(&mut self) -> Result<Statement, SqlError> {
        let if_not_exists = self.keywords(&["IF", "NOT", "EXISTS"]);
        let name = self.table_name()?;
        self.expect_token(&Token::LParen)?;
        let mut columns = Vec::new();
        let mut depth = 1usize;
        while depth > 0 {
            let t = self
                .next()
                .ok_or_else(|| SqlError::parse("unbalanced parentheses"))?;
            match &t {
                Token::LParen => depth += 1,
                Token::RParen => depth -= 1,
                Token::Comma => {}
                Token::Word(w) if depth == 1 => {
                    let constraint = w.quote_style.is_none()
                        && matches!(
                            w.keyword,
                            Keyword::PRIMARY
                                | Keyword::INDEX
                                | Keyword::CONSTRAINT
                                | Keyword::CHECK
                        );
                    if !constraint {
                        let name = if w.quote_style.is_some() {
                            w.value.clone()
                        } else {
                            w.value.to_lowercase()
                        };
                        columns.push((name, self.column_type()));
                    }
                    self.skip_element();
                }
                _ => {}
            }
        }
        let (mut shards, mut replicas) = (None, None);
        loop {
            if self.keyword("CLUSTERED") {
                if self.keyword("BY") {
                    self.expect_token(&Token::LParen)?;
                    self.ident()?;
                    self.expect_token(&Token::RParen)?;
                }
                if self.keyword("INTO") {
                    match self.literal()? {
                        Value::Number(n) => {
                            shards = Some(
                                n.as_u64()
                                    .and_then(|n| u32::try_from(n).ok())
                                    .ok_or_else(|| SqlError::parse("bad number of shards"))?,
                            );
                        }
                        _ => return Err(SqlError::parse("the number of shards must be a number")),
                    }
                    self.expect_keyword("SHARDS")?;
                }
            } else if self.keyword("PARTITIONED") {
                return Err(SqlError::unsupported("partitioned tables"));
            } else if self.keyword("WITH") {
                for (k, v) in self.assignments()? {
                    // Other table settings are accepted and not modelled.
                    if k == "number_of_replicas" {
                        replicas = Some(replicas_of(&v)?);
                    }
                }
            } else {
                break;
            }
        }
        Ok(Statement::CreateTable {
            name,
            if_not_exists,
            shards,
            replicas,
            columns,
        })
    }
}

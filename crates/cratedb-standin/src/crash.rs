//! `crash`, the stand-in's CrateDB shell: non-interactive only, for `kubectl exec`.
//!
//! Follows crash's "Running Crash" page (<https://cratedb.com/docs/crate/crash/en/latest/run.html>)
//! and "Response formats" (`appendices/formats.html`): `--hosts` (one or several, space or
//! comma separated, `http://` optional, port 4200 by default; the first that answers is used),
//! `-U/--username` (default `crate`), the password from `CRATEPW`, `-c/--command`, `--format`
//! (`tabular`, `json`, `json_row`, `raw`, `csv`), `--verify-ssl` accepted and ignored (the
//! stand-in has no TLS). Without `--command` the statements come from standard input, one or
//! several separated by `;`, so a secret (a license key) never appears on a command line.
//! Statements run one after another over `POST /_sql`; the first error is printed to standard
//! error as the server's message (`RoleAlreadyExistsException[…]`) and the exit code is 1.
//! Status lines are not printed, as crash omits them when not interactive.

use std::io::{Read, Write};

use clap::{Parser, ValueEnum};
use serde_json::{Value, json};

/// The response formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum Format {
    Tabular,
    Json,
    JsonRow,
    Raw,
    Csv,
}

/// crash's command line (the options the stand-in honours; others are refused).
#[derive(Debug, Parser)]
#[command(
    name = "crash",
    about = "The CrateDB stand-in's crash: runs statements against a stand-in node over HTTP. Not CrateDB's crash."
)]
pub struct CrashArgs {
    /// Hosts to connect to, `host[:port]` or `http://host:port`, space or comma separated.
    #[arg(long = "hosts", visible_alias = "host", num_args = 1.., value_delimiter = ',', default_value = "localhost:4200")]
    pub hosts: Vec<String>,
    /// The user to authenticate as; the password comes from `CRATEPW`.
    #[arg(short = 'U', long = "username", default_value = "crate")]
    pub username: String,
    /// Accepted and ignored: the stand-in serves plain HTTP.
    #[arg(long = "verify-ssl", num_args = 0..=1, default_missing_value = "true")]
    pub verify_ssl: Option<String>,
    /// The output format.
    #[arg(long, value_enum, default_value_t = Format::Tabular)]
    pub format: Format,
    /// Run these statements and exit; without it they are read from standard input.
    #[arg(short = 'c', long = "command")]
    pub command: Option<String>,
    /// Accepted and ignored (no prompt: the password comes from `CRATEPW`).
    #[arg(short = 'W', long = "password")]
    pub password_prompt: bool,
    /// Accepted and ignored.
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,
}

/// A host as a base URL: `http://` added when absent, port 4200 when absent.
pub fn host_url(host: &str) -> String {
    let host = host.trim().trim_end_matches('/');
    let (scheme, rest) = match host.split_once("://") {
        Some((s, r)) => (s, r),
        None => ("http", host),
    };
    let has_port = match rest.rsplit_once(':') {
        Some((h, p)) => p.parse::<u16>().is_ok() && (!h.contains(':') || h.ends_with(']')),
        None => false,
    };
    if has_port {
        format!("{scheme}://{rest}")
    } else {
        format!("{scheme}://{rest}:4200")
    }
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "NULL".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn tabular(cols: &[String], rows: &[Vec<Value>]) -> String {
    let cells: Vec<Vec<String>> = rows.iter().map(|r| r.iter().map(cell).collect()).collect();
    let widths: Vec<usize> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| {
            cells
                .iter()
                .filter_map(|r| r.get(i).map(|s| s.chars().count()))
                .chain([c.chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let rule = format!(
        "+{}+\n",
        widths
            .iter()
            .map(|w| "-".repeat(w + 2))
            .collect::<Vec<_>>()
            .join("+")
    );
    let line = |values: &[String]| {
        let parts: Vec<String> = widths
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let v = values.get(i).map(String::as_str).unwrap_or("");
                format!(" {v}{} ", " ".repeat(w - v.chars().count().min(*w)))
            })
            .collect();
        format!("|{}|\n", parts.join("|"))
    };
    let mut out = rule.clone();
    out.push_str(&line(cols));
    out.push_str(&rule);
    for r in &cells {
        out.push_str(&line(r));
    }
    if !cells.is_empty() {
        out.push_str(&rule);
    }
    out
}

fn csv_cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) if s.contains([',', '\'', '\n']) => {
            format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
        }
        Value::String(s) => s.clone(),
        Value::Object(_) | Value::Array(_) => {
            format!("'{}'", v.to_string().replace('\'', "\\'"))
        }
        other => other.to_string(),
    }
}

/// The text crash prints for a result in `format` (nothing for a statement without columns,
/// except in `raw`).
pub fn render(format: Format, body: &Value) -> String {
    let cols: Vec<String> = body["cols"]
        .as_array()
        .map(|c| c.iter().map(cell).collect())
        .unwrap_or_default();
    let rows: Vec<Vec<Value>> = body["rows"]
        .as_array()
        .map(|r| {
            r.iter()
                .map(|row| row.as_array().cloned().unwrap_or_default())
                .collect()
        })
        .unwrap_or_default();
    let objects = || -> Vec<Value> {
        rows.iter()
            .map(|r| {
                Value::Object(
                    cols.iter()
                        .cloned()
                        .zip(r.iter().cloned())
                        .collect::<serde_json::Map<_, _>>(),
                )
            })
            .collect()
    };
    match format {
        Format::Raw => format!("{body}\n"),
        _ if cols.is_empty() => String::new(),
        Format::Tabular => tabular(&cols, &rows),
        Format::Json => serde_json::to_string_pretty(&objects()).unwrap_or_default() + "\n",
        Format::JsonRow => objects().iter().map(|o| format!("{o}\n")).collect(),
        Format::Csv => {
            let mut out = cols.join(",") + "\n";
            for r in &rows {
                out.push_str(&r.iter().map(csv_cell).collect::<Vec<_>>().join(","));
                out.push('\n');
            }
            out
        }
    }
}

/// Why a statement was not run to success.
#[derive(Debug, thiserror::Error)]
pub enum CrashError {
    /// The server's error, as crash prints it: its message.
    #[error("{message}")]
    Sql { message: String, code: i64 },
    #[error("Server not available, exception: {0}")]
    Connect(String),
    #[error("{0}")]
    Other(String),
}

/// Statements of `text`, split at `;` outside quotes and comments.
pub fn statements(text: &str) -> Vec<String> {
    crate::pgwire::split_statements(text)
        .into_iter()
        .map(str::to_owned)
        .collect()
}

/// Runs one statement on the first of `hosts` that answers.
pub async fn execute(
    client: &reqwest::Client,
    hosts: &[String],
    user: &str,
    password: Option<&str>,
    stmt: &str,
) -> Result<Value, CrashError> {
    let mut last = CrashError::Connect("no host given".to_owned());
    for host in hosts {
        let url = format!("{}/_sql", host_url(host));
        let mut req = client.post(&url).json(&json!({"stmt": stmt}));
        if user != crate::model::SUPERUSER || password.is_some() {
            req = req.basic_auth(user, password);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => {
                last = CrashError::Connect(format!("{url}: {e}"));
                continue;
            }
        };
        let body: Value = resp
            .json()
            .await
            .map_err(|e| CrashError::Other(format!("invalid response from {url}: {e}")))?;
        if let Some(err) = body.get("error") {
            return Err(CrashError::Sql {
                message: err["message"]
                    .as_str()
                    .unwrap_or("unknown error")
                    .to_owned(),
                code: err["code"].as_i64().unwrap_or(5000),
            });
        }
        return Ok(body);
    }
    Err(last)
}

/// crash's main: parses `args` (without the program name), runs the statements of `--command`
/// or `stdin`, writes results to `out` and the first error to `err`. Returns the exit code.
pub async fn run(
    args: Vec<String>,
    password: Option<String>,
    stdin: &mut (dyn Read + Send),
    out: &mut (dyn Write + Send),
    err: &mut (dyn Write + Send),
) -> i32 {
    let args = match CrashArgs::try_parse_from(std::iter::once("crash".to_owned()).chain(args)) {
        Ok(a) => a,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let text = e.render().to_string();
            let _ = if code == 0 {
                out.write_all(text.as_bytes())
            } else {
                err.write_all(text.as_bytes())
            };
            return code;
        }
    };
    let text = match args.command.clone() {
        Some(c) => c,
        None => {
            let mut buf = String::new();
            if let Err(e) = stdin.read_to_string(&mut buf) {
                let _ = writeln!(err, "reading statements from standard input: {e}");
                return 1;
            }
            buf
        }
    };
    let hosts: Vec<String> = args
        .hosts
        .iter()
        .flat_map(|h| h.split_whitespace())
        .map(str::to_owned)
        .collect();
    let client = match crate::cluster::transport::client(
        std::time::Duration::from_secs(30),
        std::time::Duration::from_secs(30),
    ) {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(err, "{e}");
            return 1;
        }
    };
    for stmt in statements(&text) {
        match execute(&client, &hosts, &args.username, password.as_deref(), &stmt).await {
            Ok(body) => {
                let _ = out.write_all(render(args.format, &body).as_bytes());
            }
            Err(e) => {
                let _ = writeln!(err, "{e}");
                return 1;
            }
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_become_urls() {
        assert_eq!(host_url("localhost:4200"), "http://localhost:4200");
        assert_eq!(host_url("http://127.0.4.7:4200/"), "http://127.0.4.7:4200");
        assert_eq!(host_url("crate-0.ns"), "http://crate-0.ns:4200");
        assert_eq!(host_url("[::1]"), "http://[::1]:4200");
    }

    #[test]
    fn renders_crash_formats() {
        let body = json!({"cols": ["name", "n"], "rows": [["a", 1], [null, 22]], "rowcount": 2});
        assert_eq!(
            render(Format::Tabular, &body),
            "+------+----+\n| name | n  |\n+------+----+\n| a    | 1  |\n| NULL | 22 |\n+------+----+\n"
        );
        assert_eq!(
            render(Format::JsonRow, &body),
            "{\"n\":1,\"name\":\"a\"}\n{\"n\":22,\"name\":null}\n"
        );
        assert_eq!(render(Format::Csv, &body), "name,n\na,1\n,22\n");
        let ddl = json!({"cols": [], "rows": [], "rowcount": 1});
        assert_eq!(render(Format::Tabular, &ddl), "");
        let parsed: Value = serde_json::from_str(&render(Format::Json, &body)).unwrap();
        assert_eq!(parsed[1]["n"], 22);
    }

    #[test]
    fn parses_the_operators_command_line() {
        let a = CrashArgs::try_parse_from([
            "crash",
            "--hosts",
            "http://10.0.0.1:4200,10.0.0.2",
            "--verify-ssl",
            "false",
            "-U",
            "system",
            "--format",
            "json",
            "-c",
            "SELECT 1",
        ])
        .unwrap();
        assert_eq!(a.hosts, ["http://10.0.0.1:4200", "10.0.0.2"]);
        assert_eq!(a.username, "system");
        assert_eq!(a.format, Format::Json);
        assert_eq!(a.command.as_deref(), Some("SELECT 1"));
        let b = CrashArgs::try_parse_from(["crash", "--host", "a", "b"]).unwrap();
        assert_eq!(b.hosts, ["a", "b"]);
        assert_eq!(b.username, "crate");
    }
}

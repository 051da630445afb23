//! What each client command calls (the routes of `docs/api.md`): each resolves its settings,
//! makes its calls and returns the text to print; progress of `--wait` goes to standard error.

use std::io::BufRead;
use std::path::Path;
use std::time::Duration;

use jiff::Timestamp;
use reqwest::Method;
use serde_json::{Map, Value, json};

use super::CliError;
use super::args::*;
use super::client::ApiClient;
use super::config::{self, Env, Settings};
use super::output::{Format, Shape, render};
use super::wait::{self, Expectation};

/// A connected command: its settings, its client and its output format.
struct Session {
    settings: Settings,
    client: ApiClient,
    output: Format,
}

impl Session {
    fn open(
        opts: &ClientOpts,
        username: Option<&str>,
        env: &Env,
        cwd: &Path,
    ) -> Result<Self, CliError> {
        let settings = config::resolve(&opts.overrides(username), env, cwd, Timestamp::now())?;
        let client = ApiClient::new(&settings)?;
        Ok(Self {
            settings,
            client,
            output: opts.output,
        })
    }

    fn ns(&self) -> &str {
        &self.settings.namespace
    }

    fn render(&self, value: &Value, shape: Shape) -> Result<String, CliError> {
        render(value, shape, self.output)
    }

    /// `/api/v1/namespaces/{ns}/clusters/{engine}/{name}`, the engine found by listing the
    /// namespace's clusters when not given.
    async fn cluster_path(&self, name: &str, engine: Option<Engine>) -> Result<String, CliError> {
        let engine = match engine {
            Some(e) => e.as_str().to_string(),
            None => self.find_engine(name).await?,
        };
        Ok(format!(
            "/api/v1/namespaces/{}/clusters/{engine}/{name}",
            self.ns()
        ))
    }

    async fn find_engine(&self, name: &str) -> Result<String, CliError> {
        let list = self
            .client
            .call(
                Method::GET,
                &format!("/api/v1/namespaces/{}/clusters", self.ns()),
                None,
            )
            .await?;
        let engines: Vec<String> = list
            .get("clusters")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|c| c.get("name").and_then(Value::as_str) == Some(name))
            .filter_map(|c| c.get("engine").and_then(Value::as_str).map(str::to_string))
            .collect();
        match engines.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(CliError::Api {
                code: 404,
                message: format!("no cluster {name} in namespace {}", self.ns()),
            }),
            many => Err(CliError::Config(format!(
                "{name} names clusters of several engines ({}): pass --engine",
                many.join(", ")
            ))),
        }
    }

    /// Prints an action's answer, or waits for it and prints the cluster it left.
    async fn finish_action(
        &self,
        path: &str,
        answer: &Value,
        shape: Shape,
        wait: &WaitOpts,
        exp: Expectation,
    ) -> Result<String, CliError> {
        if !wait.wait {
            return self.render(answer, shape);
        }
        self.show_when_done(path, &exp, Duration::from_secs(wait.timeout))
            .await
    }

    /// Prints the answer of an action that made an object (a restore, an upgrade), or follows
    /// that object (`{path}/{collection}/{name}`, `name` from the answer) until `judge` says it
    /// is done — then waits for the cluster it names to settle on its generation and shows it
    /// (the cluster at `path`, or a new one: an etcd restore makes one) — or failed, which ends
    /// the wait at once with its reason (a refusal too).
    async fn follow_then_show(
        &self,
        path: &str,
        answer: &Value,
        shape: Shape,
        wait: &WaitOpts,
        collection: &str,
        judge: fn(&Value) -> wait::WaitState,
    ) -> Result<String, CliError> {
        if !wait.wait {
            return self.render(answer, shape);
        }
        let name = answer.get("name").and_then(Value::as_str).ok_or_else(|| {
            CliError::Protocol(format!("the answer names no {collection} object"))
        })?;
        let started = std::time::Instant::now();
        let timeout = Duration::from_secs(wait.timeout);
        let done = wait::wait_phase(
            &self.client,
            &format!("{path}/{collection}/{name}"),
            timeout,
            judge,
        )
        .await?;
        let path = &result_path(path, &done);
        let generation = self
            .client
            .call(Method::GET, path, None)
            .await?
            .get("generation")
            .and_then(Value::as_i64);
        let exp = Expectation {
            generation,
            ..Expectation::default()
        };
        self.show_when_done(path, &exp, timeout.saturating_sub(started.elapsed()))
            .await
    }

    /// Waits for the cluster at `path` as `exp` says, then shows it (or that it is deleted).
    async fn show_when_done(
        &self,
        path: &str,
        exp: &Expectation,
        timeout: Duration,
    ) -> Result<String, CliError> {
        match wait::wait(&self.client, path, exp, timeout).await? {
            Some(cluster) => self.render(&cluster, Shape::ClusterDetail),
            None => self.render(
                &json!({"message": format!("{} is deleted", path.rsplit('/').next().unwrap_or(path))}),
                Shape::Message,
            ),
        }
    }
}

/// (pure) The path of the cluster an action's object (`object`, the API's answer) left its
/// result in: the cluster at `path`, or its sibling when the object names another cluster in
/// `cluster` (an etcd restore seeds a new cluster).
pub fn result_path(path: &str, object: &Value) -> String {
    let named = object
        .get("cluster")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty());
    match (path.rsplit_once('/'), named) {
        (Some((parent, current)), Some(cluster)) if cluster != current => {
            format!("{parent}/{cluster}")
        }
        _ => path.to_owned(),
    }
}

/// Runs a client command; the text to print on standard output.
pub async fn run(command: ClientCommand, env: &Env, cwd: &Path) -> Result<String, CliError> {
    match command {
        ClientCommand::Create(CreateCommand::Cluster(a)) => create_cluster(a, env, cwd).await,
        ClientCommand::Create(CreateCommand::User(a)) => create_user(a, env, cwd).await,
        ClientCommand::Show(ShowCommand::Cluster(a)) => show_cluster(a, env, cwd).await,
        ClientCommand::Show(ShowCommand::Backup(a)) => {
            let s = Session::open(&a.opts, a.api_user.username.as_deref(), env, cwd)?;
            let path = s.cluster_path(&a.name, a.engine).await? + "/backups";
            let answer = s.client.call(Method::GET, &path, None).await?;
            s.render(&answer, Shape::BackupList)
        }
        ClientCommand::Show(ShowCommand::User(a)) => {
            let s = Session::open(&a.opts, a.api_user.username.as_deref(), env, cwd)?;
            let path = s.cluster_path(&a.name, a.engine).await? + "/users";
            let answer = s.client.call(Method::GET, &path, None).await?;
            s.render(&answer, Shape::UserList)
        }
        ClientCommand::Update(UpdateCommand::Cluster(a)) => update_cluster(a, env, cwd).await,
        ClientCommand::Update(UpdateCommand::User(a)) => {
            let s = Session::open(&a.user.opts, a.user.api_username.as_deref(), env, cwd)?;
            let path = s.cluster_path(&a.user.cluster, a.user.engine).await?;
            let body = match read_password(a.password_stdin)? {
                Some(p) => json!({ "password": p }),
                None => json!({}),
            };
            let answer = s
                .client
                .call(
                    Method::PUT,
                    &format!("{path}/users/{}/password", a.user.username),
                    Some(&body),
                )
                .await?;
            s.render(&answer, Shape::User)
        }
        ClientCommand::Delete(DeleteCommand::Cluster(a)) => {
            let c = &a.cluster;
            let s = Session::open(&c.opts, c.api_user.username.as_deref(), env, cwd)?;
            let path = s.cluster_path(&c.name, c.engine).await?;
            let answer = s.client.call(Method::DELETE, &path, None).await?;
            let mut exp = Expectation::from_answer(&answer, None);
            exp.delete = true;
            s.finish_action(&path, &answer, Shape::Accepted, &a.wait, exp)
                .await
        }
        ClientCommand::Delete(DeleteCommand::User(a)) => {
            let s = Session::open(&a.opts, a.api_username.as_deref(), env, cwd)?;
            let path = s.cluster_path(&a.cluster, a.engine).await?;
            let answer = s
                .client
                .call(
                    Method::DELETE,
                    &format!("{path}/users/{}", a.username),
                    None,
                )
                .await?;
            s.render(&answer, Shape::Message)
        }
        ClientCommand::Scale(a) => {
            let mut body = json!({ "instances": a.instances });
            if let Some(set) = &a.node_set {
                body["nodeSet"] = json!(set);
            }
            action(&a.cluster, "scale", body, None, &a.wait, env, cwd).await
        }
        ClientCommand::Restart(a) => {
            action(&a.cluster, "restart", json!({}), None, &a.wait, env, cwd).await
        }
        ClientCommand::Failover(a) => failover(a, env, cwd).await,
        ClientCommand::Backup(a) => backup(a, env, cwd).await,
        ClientCommand::Restore(a) => restore(a, env, cwd).await,
        ClientCommand::Upgrade(UpgradeCommand::Cluster(a)) => upgrade(a, env, cwd).await,
        ClientCommand::Login(a) => login(a, env, cwd).await,
        ClientCommand::Version(a) => version(a, env, cwd).await,
    }
}

/// `POST …/{action}` and `--wait`.
async fn action(
    c: &ClusterArgs,
    action: &str,
    body: Value,
    target: Option<&str>,
    wait: &WaitOpts,
    env: &Env,
    cwd: &Path,
) -> Result<String, CliError> {
    let s = Session::open(&c.opts, c.api_user.username.as_deref(), env, cwd)?;
    let path = s.cluster_path(&c.name, c.engine).await?;
    let answer = s
        .client
        .call(Method::POST, &format!("{path}/{action}"), Some(&body))
        .await?;
    let exp = Expectation::from_answer(&answer, target);
    s.finish_action(&path, &answer, Shape::Accepted, wait, exp)
        .await
}

async fn create_cluster(a: CreateClusterArgs, env: &Env, cwd: &Path) -> Result<String, CliError> {
    let mut spec = Value::Object(Map::new());
    for item in &a.set {
        set_path(&mut spec, item, true)?;
    }
    for item in &a.set_string {
        set_path(&mut spec, item, false)?;
    }
    let s = Session::open(&a.opts, a.api_user.username.as_deref(), env, cwd)?;
    let mut body = json!({
        "engine": a.engine.as_str(),
        "name": a.name,
        "instances": a.instances,
    });
    if let Some(v) = &a.version {
        body["version"] = json!(v);
    }
    if let Some(v) = &a.storage {
        body["storage"] = json!(v);
    }
    if let Some(v) = &a.node_set {
        body["nodeSet"] = json!(v);
    }
    if !a.set.is_empty() || !a.set_string.is_empty() {
        body["spec"] = spec;
    }
    let answer = s
        .client
        .call(
            Method::POST,
            &format!("/api/v1/namespaces/{}/clusters", s.ns()),
            Some(&body),
        )
        .await?;
    let path = format!(
        "/api/v1/namespaces/{}/clusters/{}/{}",
        s.ns(),
        a.engine.as_str(),
        a.name
    );
    let exp = Expectation::from_answer(&answer, None);
    s.finish_action(&path, &answer, Shape::ClusterDetail, &a.wait, exp)
        .await
}

async fn show_cluster(a: ShowClusterArgs, env: &Env, cwd: &Path) -> Result<String, CliError> {
    let s = Session::open(&a.opts, a.api_user.username.as_deref(), env, cwd)?;
    if let Some(name) = &a.name {
        let path = s.cluster_path(name, a.engine).await?;
        let answer = s.client.call(Method::GET, &path, None).await?;
        return s.render(&answer, Shape::ClusterDetail);
    }
    let path = if a.all_namespaces {
        "/api/v1/clusters".to_string()
    } else {
        format!("/api/v1/namespaces/{}/clusters", s.ns())
    };
    let mut answer = s.client.call(Method::GET, &path, None).await?;
    if let (Some(engine), Some(list)) = (
        a.engine,
        answer.get_mut("clusters").and_then(Value::as_array_mut),
    ) {
        list.retain(|c| c.get("engine").and_then(Value::as_str) == Some(engine.as_str()));
    }
    s.render(&answer, Shape::ClusterList)
}

async fn update_cluster(a: UpdateClusterArgs, env: &Env, cwd: &Path) -> Result<String, CliError> {
    let mut spec = Value::Object(Map::new());
    for item in &a.set {
        set_path(&mut spec, item, true)?;
    }
    for item in &a.set_string {
        set_path(&mut spec, item, false)?;
    }
    if a.set.is_empty() && a.set_string.is_empty() {
        return Err(CliError::Config(
            "nothing to change: pass --set KEY=VALUE".into(),
        ));
    }
    let s = Session::open(&a.opts, a.api_user.username.as_deref(), env, cwd)?;
    let path = s.cluster_path(&a.name, a.engine).await?;
    let answer = s
        .client
        .call(Method::PATCH, &path, Some(&json!({ "spec": spec })))
        .await?;
    let exp = Expectation::from_answer(&answer, None);
    s.finish_action(&path, &answer, Shape::ClusterDetail, &a.wait, exp)
        .await
}

/// Sets `a.b.c=value` into a JSON merge patch.
pub fn set_path(patch: &mut Value, item: &str, as_json: bool) -> Result<(), CliError> {
    let (key, raw) = item
        .split_once('=')
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| CliError::Config(format!("--set {item}: expected KEY=VALUE")))?;
    let value = if as_json {
        serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()))
    } else {
        Value::String(raw.to_string())
    };
    let mut node = patch;
    let parts: Vec<&str> = key.split('.').collect();
    for (i, part) in parts.iter().enumerate() {
        if !node.is_object() {
            *node = Value::Object(Map::new());
        }
        let Some(map) = node.as_object_mut() else {
            return Err(CliError::Config(format!("--set {item}: bad key")));
        };
        if i + 1 == parts.len() {
            map.insert((*part).to_string(), value);
            return Ok(());
        }
        node = map
            .entry((*part).to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    Ok(())
}

async fn create_user(a: CreateUserArgs, env: &Env, cwd: &Path) -> Result<String, CliError> {
    let u = &a.user;
    let s = Session::open(&u.opts, u.api_username.as_deref(), env, cwd)?;
    let path = s.cluster_path(&u.cluster, u.engine).await?;
    let mut body = json!({
        "name": u.username,
        "databases": a.databases,
        "superuser": a.superuser,
        "createdb": a.createdb,
    });
    if let Some(p) = read_password(a.password_stdin)? {
        body["password"] = json!(p);
    }
    let answer = s
        .client
        .call(Method::POST, &format!("{path}/users"), Some(&body))
        .await?;
    s.render(&answer, Shape::User)
}

/// The first line of standard input, when asked for.
fn read_password(from_stdin: bool) -> Result<Option<String>, CliError> {
    if !from_stdin {
        return Ok(None);
    }
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|error| CliError::Io {
            what: "reading the password from standard input".into(),
            error,
        })?;
    let password = line.trim_end_matches(['\r', '\n']).to_string();
    if password.is_empty() {
        return Err(CliError::Config(
            "--password-stdin: standard input held no password".into(),
        ));
    }
    Ok(Some(password))
}

async fn failover(a: FailoverArgs, env: &Env, cwd: &Path) -> Result<String, CliError> {
    if a.query {
        let c = &a.cluster;
        let s = Session::open(&c.opts, c.api_user.username.as_deref(), env, cwd)?;
        let path = s.cluster_path(&c.name, c.engine).await? + "/failover";
        let answer = s.client.call(Method::GET, &path, None).await?;
        return s.render(&answer, Shape::Candidates);
    }
    let body = match &a.target {
        Some(t) => json!({ "target": t }),
        None => json!({}),
    };
    action(
        &a.cluster,
        "failover",
        body,
        a.target.as_deref(),
        &a.wait,
        env,
        cwd,
    )
    .await
}

async fn backup(a: BackupArgs, env: &Env, cwd: &Path) -> Result<String, CliError> {
    let c = &a.cluster;
    let s = Session::open(&c.opts, c.api_user.username.as_deref(), env, cwd)?;
    let path = s.cluster_path(&c.name, c.engine).await? + "/backups";
    let kind = match a.backup_type {
        BackupType::Full => "full",
        BackupType::Diff => "diff",
        BackupType::Incr => "incr",
    };
    let answer = s
        .client
        .call(Method::POST, &path, Some(&json!({ "type": kind })))
        .await?;
    if !a.wait {
        return s.render(&answer, Shape::Backup);
    }
    let name = answer
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| CliError::Protocol("the backup answer has no name".into()))?;
    let last = wait::wait_phase(
        &s.client,
        &format!("/api/v1/namespaces/{}/backups/{name}", s.ns()),
        Duration::from_secs(a.timeout),
        wait::judge_backup,
    )
    .await?;
    s.render(&last, Shape::Backup)
}

async fn restore(a: RestoreArgs, env: &Env, cwd: &Path) -> Result<String, CliError> {
    let c = &a.cluster;
    let s = Session::open(&c.opts, c.api_user.username.as_deref(), env, cwd)?;
    let path = s.cluster_path(&c.name, c.engine).await?;
    let body = match (&a.target_time, &a.backup) {
        (Some(t), _) => json!({ "targetTime": t }),
        (None, Some(b)) => json!({ "backup": b }),
        (None, None) => json!({}),
    };
    let answer = s
        .client
        .call(Method::POST, &format!("{path}/restore"), Some(&body))
        .await?;
    s.follow_then_show(
        &path,
        &answer,
        Shape::Restore,
        &a.wait,
        "restores",
        wait::judge_restore,
    )
    .await
}

/// `steward upgrade cluster X --to V`: `--wait` follows the upgrade itself (`GET
/// …/upgrades/{name}`) until it completes — then shows the cluster once it is `Available` — or
/// fails; a refusal (not newer, another operation, no recent backup) ends the wait at once with
/// its reason.
async fn upgrade(a: UpgradeArgs, env: &Env, cwd: &Path) -> Result<String, CliError> {
    let c = &a.cluster;
    let s = Session::open(&c.opts, c.api_user.username.as_deref(), env, cwd)?;
    let path = s.cluster_path(&c.name, c.engine).await?;
    let mut body = json!({ "toVersion": a.to });
    if let Some(image) = &a.image {
        body["image"] = json!(image);
    }
    if a.without_backup {
        body["withoutBackup"] = json!(true);
    }
    let answer = s
        .client
        .call(Method::POST, &format!("{path}/upgrade"), Some(&body))
        .await?;
    s.follow_then_show(
        &path,
        &answer,
        Shape::Upgrade,
        &a.wait,
        "upgrades",
        wait::judge_upgrade,
    )
    .await
}

async fn login(a: LoginArgs, env: &Env, cwd: &Path) -> Result<String, CliError> {
    let s = Session::open(&a.opts, a.api_user.username.as_deref(), env, cwd)?;
    let (token, expires, user) = s.client.login().await?;
    let path = s
        .settings
        .file
        .clone()
        .or_else(|| s.settings.user_path.clone())
        .ok_or_else(|| {
            CliError::Config("no configuration file to store the token in: pass --config".into())
        })?;
    config::store_token(&path, &token, &expires).map_err(|error| CliError::Io {
        what: format!("storing the token in {}", path.display()),
        error,
    })?;
    let answer = json!({
        "user": user,
        "expires": expires,
        "config": path.display().to_string(),
        "message": format!("logged in as {user}; the token is valid until {expires} (stored in {})", path.display()),
    });
    s.render(&answer, Shape::Message)
}

/// The client's version; the server's too when a configuration is found (a server that
/// cannot be asked is reported on standard error, not as a failure).
async fn version(a: VersionArgs, env: &Env, cwd: &Path) -> Result<String, CliError> {
    let client = env!("CARGO_PKG_VERSION");
    let session = match Session::open(&a.opts, a.api_user.username.as_deref(), env, cwd) {
        Ok(s) => Some(s),
        Err(CliError::Settings(config::ConfigError::Missing { .. })) => None,
        Err(e) => {
            eprintln!("warning: the server's version is unknown: {e}");
            None
        }
    };
    let server = match &session {
        Some(s) => match s.client.call(Method::GET, "/api/v1/version", None).await {
            Ok(v) => v.get("version").cloned(),
            Err(e) => {
                eprintln!("warning: the server's version is unknown: {e}");
                None
            }
        },
        None => None,
    };
    render(
        &json!({ "client": client, "server": server }),
        Shape::Version,
        a.opts.output,
    )
}

#[cfg(test)]
#[path = "commands_tests.rs"]
mod tests;

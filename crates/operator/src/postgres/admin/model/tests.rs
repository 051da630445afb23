use super::*;

const T: Duration = Duration::from_secs(1);

fn pair() -> PgModel {
    let m = PgModel::new();
    m.add_primary("p", "postgres", "pw").unwrap();
    m.add_standby("s", "p").unwrap();
    m
}

async fn admin(m: &PgModel, name: &str) -> Box<dyn PostgresAdmin> {
    m.connector()
        .connect(&PgModel::target(name, "postgres", "pw"), T)
        .await
        .unwrap()
}

#[tokio::test]
async fn primary_and_standby_report_themselves() {
    let m = pair();
    let (p, s) = (admin(&m, "p").await, admin(&m, "s").await);
    let (pi, si) = (
        p.server_info().await.unwrap(),
        s.server_info().await.unwrap(),
    );
    assert!(!pi.in_recovery && si.in_recovery);
    assert_eq!((pi.timeline, si.timeline), (1, 1));
    assert_eq!(pi.system_identifier, si.system_identifier);
    assert_eq!(pi.version_num, VERSION_NUM);
    let other = PgModel::new();
    other.add_primary("p", "postgres", "pw").unwrap();
    m.add_primary("q", "postgres", "pw").unwrap();
    let q = admin(&m, "q").await.server_info().await.unwrap();
    assert_ne!(q.system_identifier, pi.system_identifier, "separate initdb");
}

#[tokio::test]
async fn standbys_replay_only_what_the_primary_wrote() {
    let m = pair();
    let (p, s) = (admin(&m, "p").await, admin(&m, "s").await);
    let WalPosition::Primary { current: start } = p.wal_position().await.unwrap() else {
        panic!("primary expected");
    };
    p.create_role("app", "a", &RoleOptions::default())
        .await
        .unwrap();
    let WalPosition::Primary { current } = p.wal_position().await.unwrap() else {
        panic!("primary expected");
    };
    assert!(current > start, "a write advances the WAL");
    // Not replayed yet: the standby neither has the role nor lets it log in.
    assert!(!s.role_exists("app").await.unwrap());
    let login = PgModel::target("s", "app", "a");
    assert!(!m.connector().check_login(&login, T).await.unwrap());
    // Received but not replayed.
    m.receive("s", current).unwrap();
    assert_eq!(
        s.wal_position().await.unwrap(),
        WalPosition::Standby {
            receive: Some(current),
            replay: Some(start)
        }
    );
    let rows = p.replication().await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].application_name, "s");
    assert_eq!(rows[0].state, "streaming");
    assert_eq!(
        (rows[0].sent_lsn, rows[0].replay_lsn),
        (Some(current), Some(start))
    );
    // Never past the primary.
    m.advance("s", Lsn(u64::MAX)).unwrap();
    assert_eq!(s.wal_position().await.unwrap().applied(), Some(current));
    assert!(s.role_exists("app").await.unwrap());
    assert!(m.connector().check_login(&login, T).await.unwrap());
    // Traffic on the primary; nothing streams while it is down.
    m.advance("p", Lsn(current.0 + 0x1000)).unwrap();
    m.kill("p").unwrap();
    m.catch_up("s").unwrap();
    assert_eq!(s.wal_position().await.unwrap().applied(), Some(current));
    m.start("p").unwrap();
    m.catch_up("s").unwrap();
    assert_eq!(
        s.wal_position().await.unwrap().applied(),
        Some(Lsn(current.0 + 0x1000))
    );
    assert!(s.replication().await.unwrap().is_empty());
}

#[tokio::test]
async fn standbys_refuse_writes() {
    let m = pair();
    let s = admin(&m, "s").await;
    let opts = RoleOptions::default();
    assert!(matches!(
        s.create_role("x", "x", &opts).await,
        Err(PgAdminError::ReadOnly(_))
    ));
    assert!(matches!(
        s.alter_password("postgres", "new").await,
        Err(PgAdminError::ReadOnly(_))
    ));
    assert!(matches!(
        s.drop_role("nobody").await,
        Err(PgAdminError::ReadOnly(_))
    ));
    assert!(matches!(
        s.grant_database("postgres", "postgres").await,
        Err(PgAdminError::ReadOnly(_))
    ));
    assert!(matches!(
        s.create_database("new", "postgres").await,
        Err(PgAdminError::ReadOnly(_))
    ));
    // Nothing to do is not a write.
    assert!(!s.create_database("postgres", "postgres").await.unwrap());
    assert!(m.changes().is_empty());
}

#[tokio::test]
async fn promotion_moves_to_the_next_timeline() {
    let m = pair();
    let (p, s) = (admin(&m, "p").await, admin(&m, "s").await);
    assert!(matches!(
        p.promote(T).await,
        Err(PgAdminError::NotInRecovery(_))
    ));
    p.create_role("late", "l", &RoleOptions::default())
        .await
        .unwrap();
    m.receive("s", Lsn(u64::MAX)).unwrap();
    assert!(s.promote(T).await.unwrap());
    let info = s.server_info().await.unwrap();
    assert!(!info.in_recovery);
    assert_eq!(info.timeline, 2);
    // Received but not replayed is lost.
    assert!(!s.role_exists("late").await.unwrap());
    s.create_role("app", "a", &RoleOptions::default())
        .await
        .unwrap();
    assert!(matches!(
        s.promote(T).await,
        Err(PgAdminError::NotInRecovery(_))
    ));
    // The old primary still runs on timeline 1.
    assert_eq!(p.server_info().await.unwrap().timeline, 1);
    assert!(!p.role_exists("app").await.unwrap());
}

#[tokio::test]
async fn logins_check_passwords_and_databases() {
    let m = pair();
    let c = m.connector();
    let p = admin(&m, "p").await;
    let target = PgModel::target("p", "app", "old");
    assert!(!c.check_login(&target, T).await.unwrap(), "no such role");
    p.create_role("app", "old", &RoleOptions::default())
        .await
        .unwrap();
    assert!(c.check_login(&target, T).await.unwrap());
    assert!(matches!(
        p.create_role("app", "x", &RoleOptions::default()).await,
        Err(PgAdminError::AlreadyExists(_))
    ));
    p.alter_password("app", "new").await.unwrap();
    assert!(!c.check_login(&target, T).await.unwrap());
    assert!(
        c.check_login(&target.as_user("app", "new"), T)
            .await
            .unwrap()
    );
    assert!(matches!(
        p.alter_password("ghost", "x").await,
        Err(PgAdminError::NotFound(_))
    ));
    // NOLOGIN roles are refused even with the right password.
    let nologin = RoleOptions {
        login: false,
        ..RoleOptions::default()
    };
    p.create_role("group", "g", &nologin).await.unwrap();
    assert!(matches!(
        c.connect(&PgModel::target("p", "group", "g"), T)
            .await
            .err(),
        Some(PgAdminError::AuthFailed(_))
    ));
    // Databases.
    let on_db = target.as_user("app", "new").on_database("appdb");
    assert!(matches!(
        c.check_login(&on_db, T).await,
        Err(PgAdminError::NotFound(_))
    ));
    assert!(p.create_database("appdb", "app").await.unwrap());
    assert!(!p.create_database("appdb", "app").await.unwrap());
    assert!(matches!(
        p.create_database("other", "ghost").await,
        Err(PgAdminError::NotFound(_))
    ));
    p.grant_database("app", "appdb").await.unwrap();
    p.grant_database("app", "appdb").await.unwrap();
    assert!(c.check_login(&on_db, T).await.unwrap());
    // Non-superusers may not change roles.
    let app = c.connect(&target.as_user("app", "new"), T).await.unwrap();
    assert!(matches!(
        app.create_role("x", "x", &RoleOptions::default()).await,
        Err(PgAdminError::Other(_))
    ));
}

#[tokio::test]
async fn an_ordinary_role_changes_only_its_own_password() {
    let m = pair();
    let c = m.connector();
    let p = admin(&m, "p").await;
    let opts = RoleOptions::default();
    p.create_role("app", "a1", &opts).await.unwrap();
    p.create_role("other", "o1", &opts).await.unwrap();
    let app = c
        .connect(&PgModel::target("p", "app", "a1"), T)
        .await
        .unwrap();
    app.alter_password("app", "a2").await.unwrap();
    assert!(
        c.check_login(&PgModel::target("p", "app", "a2"), T)
            .await
            .unwrap()
    );
    for other in ["other", "postgres"] {
        let e = app.alter_password(other, "x").await.unwrap_err();
        assert!(e.to_string().contains("42501"), "{e}");
    }
    assert!(matches!(
        app.alter_password("ghost", "x").await,
        Err(PgAdminError::NotFound(_))
    ));
    let kinds: Vec<(CallKind, bool)> = m
        .changes()
        .iter()
        .map(|c| (c.kind, c.object == "app"))
        .collect();
    assert_eq!(
        kinds,
        [
            (CallKind::CreateRole, true),
            (CallKind::CreateRole, false),
            (CallKind::AlterPassword, true)
        ]
    );
}

#[tokio::test]
async fn database_privileges_are_a_read() {
    let m = pair();
    let p = admin(&m, "p").await;
    p.create_role("app", "a", &RoleOptions::default())
        .await
        .unwrap();
    p.create_database("appdb", "postgres").await.unwrap();
    let writes = m.changes().len();
    assert!(!p.has_database_privileges("app", "appdb").await.unwrap());
    assert!(
        p.has_database_privileges("postgres", "appdb")
            .await
            .unwrap()
    );
    assert_eq!(m.changes().len(), writes);
    p.grant_database("app", "appdb").await.unwrap();
    assert!(p.has_database_privileges("app", "appdb").await.unwrap());
    assert!(matches!(
        p.has_database_privileges("ghost", "nowhere").await,
        Err(PgAdminError::NotFound(_))
    ));
}

#[tokio::test]
async fn drop_role_checks_dependencies() {
    let m = pair();
    let p = admin(&m, "p").await;
    p.drop_role("ghost").await.unwrap();
    p.create_role("app", "a", &RoleOptions::default())
        .await
        .unwrap();
    p.create_database("appdb", "postgres").await.unwrap();
    p.grant_database("app", "appdb").await.unwrap();
    assert!(matches!(
        p.drop_role("app").await,
        Err(PgAdminError::Other(_))
    ));
    assert!(matches!(
        p.drop_role("postgres").await,
        Err(PgAdminError::Other(_))
    ));
    p.create_role("tmp", "t", &RoleOptions::default())
        .await
        .unwrap();
    p.drop_role("tmp").await.unwrap();
    assert!(!p.role_exists("tmp").await.unwrap());
    assert!(matches!(
        p.drop_role("").await,
        Err(PgAdminError::Invalid(_))
    ));
}

#[tokio::test]
async fn killed_instances_are_unavailable() {
    let m = pair();
    let c = m.connector();
    let p = admin(&m, "p").await;
    m.kill("p").unwrap();
    assert!(matches!(
        p.server_info().await,
        Err(PgAdminError::Unavailable(_))
    ));
    let target = PgModel::target("p", "postgres", "pw");
    assert!(matches!(
        c.check_login(&target, T).await,
        Err(PgAdminError::Unavailable(_))
    ));
    m.start("p").unwrap();
    assert!(
        matches!(p.server_info().await, Err(PgAdminError::Unavailable(_))),
        "connections do not survive a restart"
    );
    assert!(c.check_login(&target, T).await.unwrap());
    assert!(matches!(
        c.check_login(&PgModel::target("nowhere", "postgres", "pw"), T)
            .await,
        Err(PgAdminError::Unavailable(_))
    ));
    m.fail_next("p", PgAdminError::Unavailable("injected".into()))
        .unwrap();
    assert!(c.check_login(&target, T).await.is_err());
    assert!(c.check_login(&target, T).await.unwrap());
}

#[tokio::test]
async fn calls_are_recorded() {
    let m = pair();
    let p = admin(&m, "p").await;
    p.create_role("app", "a", &RoleOptions::default())
        .await
        .unwrap();
    let _ = p.create_role("app", "a", &RoleOptions::default()).await;
    assert!(p.role_exists("app").await.unwrap());
    let kinds: Vec<(CallKind, bool)> = m.calls().iter().map(|c| (c.kind, c.ok)).collect();
    assert_eq!(
        kinds,
        [
            (CallKind::Connect, true),
            (CallKind::CreateRole, true),
            (CallKind::CreateRole, false),
            (CallKind::RoleExists, true)
        ]
    );
    assert_eq!(m.changes().len(), 1);
    assert_eq!(m.changes()[0].object, "app");
}

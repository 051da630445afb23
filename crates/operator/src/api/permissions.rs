//! (pure) The REST API's permissions (seed 004, "REST API": every call has a permission; API
//! roles grant permissions) and the built-in roles. This file is the one place in code where
//! the table lives; `docs/api.md` shows it and a test keeps the two equal.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

/// One permission: what one API call needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Permission {
    /// `GET /api/v1/version`, `GET /api/v1/health`.
    ShowVersion,
    /// Create a cluster.
    CreateCluster,
    /// List and show clusters, their status, operations and progress.
    ShowCluster,
    /// Change a cluster's spec (other than scaling).
    UpdateCluster,
    /// Delete a cluster.
    DeleteCluster,
    /// Scale a cluster.
    ScaleCluster,
    /// Restart a cluster's members or instances.
    RestartCluster,
    /// Query fail-over candidates, fail over or switch over.
    Failover,
    /// Create a database user.
    CreateUser,
    /// Rotate a database user's password.
    UpdateUser,
    /// Delete a database user.
    DeleteUser,
    /// List and show database users (never their passwords).
    ShowUser,
    /// Create a backup.
    CreateBackup,
    /// List and show backups.
    ShowBackup,
    /// Restore a cluster.
    Restore,
    /// Create, change and delete schedules.
    CreateSchedule,
    /// List and show schedules.
    ShowSchedule,
    /// Create, change and delete SQL policies.
    CreatePolicy,
    /// List and show SQL policies.
    ShowPolicy,
}

impl Permission {
    /// Every permission, in the table's order.
    pub const ALL: [Self; 19] = [
        Self::ShowVersion,
        Self::CreateCluster,
        Self::ShowCluster,
        Self::UpdateCluster,
        Self::DeleteCluster,
        Self::ScaleCluster,
        Self::RestartCluster,
        Self::Failover,
        Self::CreateUser,
        Self::UpdateUser,
        Self::DeleteUser,
        Self::ShowUser,
        Self::CreateBackup,
        Self::ShowBackup,
        Self::Restore,
        Self::CreateSchedule,
        Self::ShowSchedule,
        Self::CreatePolicy,
        Self::ShowPolicy,
    ];

    /// The name roles list it by.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ShowVersion => "ShowVersion",
            Self::CreateCluster => "CreateCluster",
            Self::ShowCluster => "ShowCluster",
            Self::UpdateCluster => "UpdateCluster",
            Self::DeleteCluster => "DeleteCluster",
            Self::ScaleCluster => "ScaleCluster",
            Self::RestartCluster => "RestartCluster",
            Self::Failover => "Failover",
            Self::CreateUser => "CreateUser",
            Self::UpdateUser => "UpdateUser",
            Self::DeleteUser => "DeleteUser",
            Self::ShowUser => "ShowUser",
            Self::CreateBackup => "CreateBackup",
            Self::ShowBackup => "ShowBackup",
            Self::Restore => "Restore",
            Self::CreateSchedule => "CreateSchedule",
            Self::ShowSchedule => "ShowSchedule",
            Self::CreatePolicy => "CreatePolicy",
            Self::ShowPolicy => "ShowPolicy",
        }
    }

    /// Whether the call only reads.
    pub fn is_read(self) -> bool {
        matches!(
            self,
            Self::ShowVersion
                | Self::ShowCluster
                | Self::ShowUser
                | Self::ShowBackup
                | Self::ShowSchedule
                | Self::ShowPolicy
        )
    }

    /// Whether the call deletes something (the `operator` role may not).
    pub fn is_delete(self) -> bool {
        matches!(self, Self::DeleteCluster | Self::DeleteUser)
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Permission {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| format!("unknown permission {s:?}"))
    }
}

/// A role: a name and the permissions it grants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Role {
    /// Its name.
    pub name: String,
    /// What it grants.
    pub permissions: BTreeSet<Permission>,
}

/// The built-in roles: `admin` (everything), `operator` (everything but deletes: the day-2
/// actions), `readonly` (the reads).
pub fn builtin_roles() -> Vec<Role> {
    let of =
        |keep: fn(Permission) -> bool| Permission::ALL.into_iter().filter(|p| keep(*p)).collect();
    vec![
        Role {
            name: "admin".into(),
            permissions: of(|_| true),
        },
        Role {
            name: "operator".into(),
            permissions: of(|p| !p.is_delete()),
        },
        Role {
            name: "readonly".into(),
            permissions: of(Permission::is_read),
        },
    ]
}

/// (pure) A role from its definition text: permission names separated by commas, spaces or
/// new lines (`*` for every permission). Unknown names are an error naming them.
pub fn parse_role(name: &str, text: &str) -> Result<Role, String> {
    let mut permissions = BTreeSet::new();
    let mut unknown = Vec::new();
    for word in text
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|w| !w.is_empty())
    {
        if word == "*" {
            permissions.extend(Permission::ALL);
        } else {
            match word.parse() {
                Ok(p) => {
                    permissions.insert(p);
                }
                Err(_) => unknown.push(word.to_owned()),
            }
        }
    }
    if !unknown.is_empty() {
        return Err(format!(
            "role {name}: unknown permissions {}",
            unknown.join(", ")
        ));
    }
    Ok(Role {
        name: name.to_owned(),
        permissions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_permission_round_trips_and_the_builtin_roles_nest() {
        for p in Permission::ALL {
            assert_eq!(p.as_str().parse::<Permission>(), Ok(p));
        }
        let roles = builtin_roles();
        let (admin, operator, readonly) = (&roles[0], &roles[1], &roles[2]);
        assert_eq!(admin.permissions.len(), Permission::ALL.len());
        assert!(readonly.permissions.is_subset(&operator.permissions));
        assert!(operator.permissions.is_subset(&admin.permissions));
        assert!(!operator.permissions.contains(&Permission::DeleteCluster));
        assert!(operator.permissions.contains(&Permission::Failover));
        assert!(readonly.permissions.iter().all(|p| p.is_read()));
        assert!(!readonly.permissions.contains(&Permission::CreateBackup));
    }

    #[test]
    fn a_role_is_parsed_from_its_list_and_unknown_names_are_named() {
        let r = parse_role("backup", "ShowCluster, CreateBackup\nShowBackup").unwrap();
        assert_eq!(
            r.permissions.into_iter().collect::<Vec<_>>(),
            [
                Permission::ShowCluster,
                Permission::CreateBackup,
                Permission::ShowBackup
            ]
        );
        assert_eq!(parse_role("all", "*").unwrap().permissions.len(), 19);
        let e = parse_role("bad", "ShowCluster, DropEverything, Nope").unwrap_err();
        assert_eq!(e, "role bad: unknown permissions DropEverything, Nope");
    }
}

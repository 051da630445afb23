//! CrateDB's error shape: an `error.code` and a message `Exception[detail]`.
//!
//! Codes follow "HTTP endpoint → Error codes"
//! (<https://cratedb.com/docs/crate/reference/en/latest/interfaces/http.html#error-codes>); the
//! leading three digits of a code are the HTTP status the endpoint answers with.

use crate::model::ModelError;

/// The documented codes the stand-in answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// 4000: invalid syntax or unsupported SQL statement (also invalid arguments).
    InvalidSql = 4000,
    /// 4004: possible feature not supported (yet).
    Unsupported = 4004,
    /// 4010: user is not authorized to perform the SQL statement.
    Unauthorized = 4010,
    /// 4011: missing privilege for user.
    MissingPrivilege = 4011,
    /// 4040: resource not found.
    NotFound = 4040,
    /// 4041: unknown relation.
    UnknownRelation = 4041,
    /// 4043: unknown column.
    UnknownColumn = 4043,
    /// 40410: unknown user.
    UnknownUser = 40410,
    /// 4093: a relation with the same name exists already.
    RelationExists = 4093,
    /// 4099: a user with the same name already exists.
    UserExists = 4099,
    /// 5000: unhandled server error.
    Internal = 5000,
    /// 5002: one or more shards are not available.
    ShardsUnavailable = 5002,
}

/// An error as CrateDB reports it. Messages never carry a password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SqlError {
    pub code: ErrorCode,
    pub message: String,
}

impl SqlError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// `SQLParseException[…]`, code 4000.
    pub fn parse(detail: impl std::fmt::Display) -> Self {
        Self::new(
            ErrorCode::InvalidSql,
            format!("SQLParseException[{detail}]"),
        )
    }

    /// `UnsupportedFeatureException[…]`, code 4004.
    pub fn unsupported(detail: impl std::fmt::Display) -> Self {
        Self::new(
            ErrorCode::Unsupported,
            format!("UnsupportedFeatureException[{detail}]"),
        )
    }

    /// The code of a numeric `error.code` (as another node answered it); unknown codes are
    /// 5000.
    pub fn from_code_number(code: u32, message: impl Into<String>) -> Self {
        let code = [
            ErrorCode::InvalidSql,
            ErrorCode::Unsupported,
            ErrorCode::Unauthorized,
            ErrorCode::MissingPrivilege,
            ErrorCode::NotFound,
            ErrorCode::UnknownRelation,
            ErrorCode::UnknownColumn,
            ErrorCode::UnknownUser,
            ErrorCode::RelationExists,
            ErrorCode::UserExists,
            ErrorCode::Internal,
            ErrorCode::ShardsUnavailable,
        ]
        .into_iter()
        .find(|c| *c as u32 == code)
        .unwrap_or(ErrorCode::Internal);
        Self::new(code, message)
    }

    /// The numeric `error.code`.
    pub fn code_number(&self) -> u32 {
        self.code as u32
    }

    /// The HTTP status: the code's leading three digits (4041 → 404, 40410 → 404).
    pub fn http_status(&self) -> u16 {
        let mut c = self.code_number();
        while c >= 1000 {
            c /= 10;
        }
        u16::try_from(c).unwrap_or(500)
    }
}

impl From<ModelError> for SqlError {
    fn from(e: ModelError) -> Self {
        let code = match &e {
            ModelError::NoMaster => ErrorCode::Internal,
            ModelError::LicenseViolation { .. }
            | ModelError::InvalidLicense(_)
            | ModelError::InvalidArgument(_) => ErrorCode::InvalidSql,
            ModelError::UserAlreadyExists(_) => ErrorCode::UserExists,
            ModelError::UserUnknown(_) => ErrorCode::UnknownUser,
            ModelError::Unauthorized(_) => ErrorCode::Unauthorized,
            ModelError::MissingPrivilege { .. } => ErrorCode::MissingPrivilege,
            ModelError::TableAlreadyExists(_) => ErrorCode::RelationExists,
            ModelError::TableUnknown(_) => ErrorCode::UnknownRelation,
            ModelError::ShardsUnavailable(_) => ErrorCode::ShardsUnavailable,
            ModelError::NodeUnknown(_) => ErrorCode::NotFound,
        };
        Self::new(code, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_is_the_leading_three_digits() {
        assert_eq!(SqlError::new(ErrorCode::UnknownUser, "").http_status(), 404);
        assert_eq!(SqlError::new(ErrorCode::UserExists, "").http_status(), 409);
        assert_eq!(SqlError::new(ErrorCode::InvalidSql, "").http_status(), 400);
        assert_eq!(
            SqlError::new(ErrorCode::MissingPrivilege, "").http_status(),
            401
        );
        assert_eq!(
            SqlError::new(ErrorCode::ShardsUnavailable, "").http_status(),
            500
        );
        let e = SqlError::from_code_number(4099, "x");
        assert_eq!(e.code, ErrorCode::UserExists);
        assert_eq!(SqlError::from_code_number(1, "x").code, ErrorCode::Internal);
    }
}

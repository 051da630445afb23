//! Literals: their types, their sizes, and what a literal list or map holds.

use ::cel::common::ast::{Expr, IdedExpr, LiteralValue};

use super::Est;
use super::decl::Ty;

/// What a literal list or map (or an expression built from one) holds.
#[derive(Clone, Copy, Debug)]
pub struct Entries {
    pub list: bool,
    pub key: Est,
    pub val: Est,
}

impl Entries {
    pub fn union(a: Option<Entries>, b: Option<Entries>) -> Option<Entries> {
        let (a, b) = (a?, b?);
        Some(Entries {
            list: a.list,
            key: a.key.union(b.key),
            val: a.val.union(b.val),
        })
    }
}

pub fn literal_type<'a>(l: &LiteralValue) -> Ty<'a> {
    match l {
        LiteralValue::Boolean(_) => Ty::Bool,
        LiteralValue::Bytes(_) => Ty::Bytes,
        LiteralValue::Double(_) => Ty::Double,
        LiteralValue::Int(_) => Ty::Int,
        LiteralValue::Null => Ty::Null,
        LiteralValue::String(_) => Ty::String,
        LiteralValue::UInt(_) => Ty::Uint,
    }
}

/// The exact size of a literal, list or map written in the expression.
pub fn literal_size(e: &IdedExpr) -> Option<Est> {
    let n = match &e.expr {
        Expr::Literal(LiteralValue::String(s)) => s.inner().chars().count() as u64,
        Expr::Literal(LiteralValue::Bytes(b)) => b.inner().len() as u64,
        Expr::Literal(_) => 1,
        Expr::List(l) => l.elements.len() as u64,
        Expr::Map(m) => m.entries.len() as u64,
        _ => return None,
    };
    Some(Est::fixed(n))
}

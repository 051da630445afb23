//! The static cost estimate of CRD validation rules and the budgets a real API server holds
//! them to when the CRD is written.
//!
//! The estimate follows cel-go's checker (`checker/cost.go`) with the Kubernetes cost estimator
//! (`k8s.io/apiserver/pkg/cel/library/cost.go`) and the schema's size estimates
//! (`apiextensions-apiserver/pkg/apiserver/schema/cel`): every identifier and field selection
//! costs 1, operations on strings cost a tenth of their length, a comprehension costs its
//! range's largest size times one iteration, and sizes come from `maxLength`, `maxItems` and
//! `maxProperties`, or else from what fits in a 3 MiB request. A rule's estimate is multiplied by
//! how many times its node can occur (the product of `maxItems`/`maxProperties` above it, or
//! what fits in a request when one is missing), then held to 10,000,000; the rules of one schema
//! together to 100,000,000 (apiextensions' `StaticEstimatedCostLimit` and
//! `StaticEstimatedCRDCostLimit`). A `messageExpression` is held to the per-rule budget on its
//! own estimate, without the multiplication.

mod calls;
mod decl;
mod estimate;
mod literal;

#[cfg(test)]
mod tests;

use serde_json::Value;

use crate::status::Cause;

pub use decl::fan_out;

/// The largest estimated cost of one rule (or `messageExpression`).
pub const RULE_LIMIT: u64 = 10_000_000;
/// The largest estimated cost of all the rules of one schema.
pub const SCHEMA_LIMIT: u64 = 100_000_000;

/// A range of sizes or costs, saturating at `u64::MAX` as cel-go's estimates do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Est {
    pub min: u64,
    pub max: u64,
}

/// The fraction of a string's length that traversing it costs.
const TRAVERSAL: f64 = 0.1;
/// What one character of a regular expression costs per character of the string it matches.
const REGEX: f64 = 0.25;

impl Est {
    pub const UNKNOWN: Est = Est {
        min: 0,
        max: u64::MAX,
    };

    pub const fn fixed(n: u64) -> Est {
        Est { min: n, max: n }
    }

    pub fn add(self, o: Est) -> Est {
        Est {
            min: self.min.saturating_add(o.min),
            max: self.max.saturating_add(o.max),
        }
    }

    pub fn mul(self, o: Est) -> Est {
        Est {
            min: self.min.saturating_mul(o.min),
            max: self.max.saturating_mul(o.max),
        }
    }

    /// Both ends times `f`, rounded up.
    pub fn factor(self, f: f64) -> Est {
        Est {
            min: factor(self.min, f),
            max: factor(self.max, f),
        }
    }

    pub fn union(self, o: Est) -> Est {
        Est {
            min: self.min.min(o.min),
            max: self.max.max(o.max),
        }
    }
}

/// `x * f` rounded up, `u64::MAX` when it does not fit.
fn factor(x: u64, f: f64) -> u64 {
    let xf = x as f64;
    if xf > 0.0 && f > 0.0 && xf > u64::MAX as f64 / f {
        return u64::MAX;
    }
    let product = (xf * f).ceil();
    if product >= 18_446_744_073_709_551_616.0 {
        u64::MAX
    } else {
        product as u64
    }
}

/// Where a rule sits, for estimating it.
#[derive(Clone, Copy)]
pub struct Site<'a> {
    /// The schema node carrying the rule.
    pub schema: &'a Value,
    /// Whether that node is the resource's root.
    pub root: bool,
    /// Whether `oldSelf` is an optional (`optionalOldSelf: true`).
    pub optional_old: bool,
}

/// The largest estimated cost of one run of `expr` (a rule or a `messageExpression`) at `site`.
pub fn estimate(expr: &::cel::common::ast::IdedExpr, site: Site<'_>) -> u64 {
    estimate::Coster::new(site).cost(expr).max
}

/// The most times the node at `site` can occur in one object when an ancestor list or map has
/// no bound: as many of its smallest serialized values as fit in a request.
pub fn unbounded_cardinality(site: Site<'_>) -> u64 {
    let min = decl::Decl::node(site.schema, site.root).min_size();
    decl::MAX_REQUEST_BYTES / (min + 1)
}

/// `cost` times `times`, saturating (upstream's `multiplyWithOverflowGuard`).
pub fn times(cost: u64, times: u64) -> u64 {
    cost.saturating_mul(times)
}

/// Upstream's message for a cost over its budget.
pub fn over_budget(what: &str, cost: u64, limit: u64) -> String {
    let factor = cost as f64 / limit as f64;
    let factor = if factor > 100.0 {
        "more than 100x".to_string()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!(
        "{what} exceeds budget by factor of {factor} (try simplifying the rule, or adding \
         maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

/// The estimated costs of all the rules of one schema, and the most expensive of them.
#[derive(Debug, Default)]
pub struct Total {
    total: u64,
    /// At most 4, most expensive first, each at least 1% of the schema's budget.
    most_expensive: Vec<(String, u64)>,
}

impl Total {
    /// Counts the cost of the rule (or `messageExpression`) at `field`.
    pub fn observe(&mut self, field: &str, cost: u64) {
        self.total = self.total.saturating_add(cost);
        if cost < SCHEMA_LIMIT / 100 {
            return;
        }
        // Stable, like the insertion sort Go uses for slices this short.
        let at = self
            .most_expensive
            .iter()
            .position(|(_, c)| *c < cost)
            .unwrap_or(self.most_expensive.len());
        self.most_expensive.insert(at, (field.to_string(), cost));
        self.most_expensive.truncate(4);
    }

    /// The causes when the schema at `schema_path` is over its budget: one per most expensive
    /// rule, then one for the schema.
    pub fn causes(&self, schema_path: &str) -> Vec<Cause> {
        if self.total <= SCHEMA_LIMIT {
            return Vec::new();
        }
        let mut out: Vec<Cause> = self
            .most_expensive
            .iter()
            .map(|(field, _)| {
                Cause::forbidden(
                    field,
                    "contributed to estimated rule cost total exceeding cost limit for entire \
                     OpenAPIv3 schema",
                )
            })
            .collect();
        out.push(Cause::forbidden(
            schema_path,
            &over_budget(
                "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                self.total,
                SCHEMA_LIMIT,
            ),
        ));
        out
    }
}

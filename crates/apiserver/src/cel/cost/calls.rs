//! The cost of function calls: the Kubernetes estimator's figures for the string functions it
//! knows (`lowerAscii`, `replace`, `split`, `join`...), then cel-go's for the functions whose
//! cost grows with their operands (comparisons and concatenation of strings, `matches`,
//! `contains`, `startsWith`, `in` on a list, `&&`/`||`, `?:`), and 1 for everything else. The
//! overload is chosen from the operands' types; where a type is unknown (`dyn`), the estimate
//! covers every overload that could apply, as cel-go's does.

use ::cel::common::ast::{CallExpr, Expr, IdedExpr, LiteralValue};

use super::decl::Ty;
use super::estimate::Coster;
use super::literal::Entries;
use super::{Est, REGEX, TRAVERSAL};

/// A call's cost (its arguments' included) and the size of its result, when known.
type CallEst = (Est, Option<Est>);

const COMPARISONS: &[&str] = &["_<_", "_<=_", "_>_", "_>=_"];

impl<'a> Coster<'a> {
    pub fn call(&mut self, e: &IdedExpr, call: &CallExpr) -> (Est, Ty<'a>) {
        let name = call.func_name.as_str();
        let target = call.target.as_deref();
        let args = call.args.as_slice();
        if name == "dyn" && target.is_none() && args.len() == 1 {
            let cost = self.cost(&args[0]);
            let size = self.size(&args[0]);
            self.set_size(e, size);
            let entries = self.entries_of(&args[0]);
            self.set_entries(e, entries);
            return (Est::fixed(1).add(cost), Ty::Dyn);
        }
        let costs: Vec<Est> = args.iter().map(|a| self.cost(a)).collect();
        let mut sum = Est::default();
        if let Some(t) = target {
            sum = sum.add(self.cost(t));
        }
        let (cost, mut size) = self.function(e, name, target, args, &costs);
        if name == "_[_]" && args.len() == 2 {
            let step = match self.ty(&args[0]) {
                Ty::List(_) => "@items",
                _ => "@values",
            };
            size = self.entries_of(&args[0]).map(|en| en.val);
            let mut path = self.path(&args[0]);
            path.push(step.to_string());
            self.set_path(e, path);
        }
        let ty = self.result_type(name, target, args);
        self.set_type(e, ty.clone());
        if size.is_none() {
            size = self.size(e);
        }
        self.set_size(e, size);
        (sum.add(cost), ty)
    }

    /// The type of the first operand whose type is known.
    fn operand_ty<'e>(&self, args: impl IntoIterator<Item = &'e IdedExpr>) -> Ty<'a> {
        args.into_iter()
            .map(|a| self.ty(a))
            .find(|t| !t.is_dyn())
            .unwrap_or(Ty::Dyn)
    }

    fn function(
        &mut self,
        e: &IdedExpr,
        name: &str,
        target: Option<&IdedExpr>,
        args: &[IdedExpr],
        costs: &[Est],
    ) -> CallEst {
        let args_cost = costs.iter().fold(Est::default(), |s, c| s.add(*c));
        if let Some((cost, size)) = self.kubernetes(name, target, args) {
            return (cost.add(args_cost), size);
        }
        let one = (Est::fixed(1).add(args_cost), None);
        match (name, target, args) {
            ("format", Some(t), [_]) => (self.traversal(t).add(args_cost), None),
            ("bytes", None, [a]) if matches!(self.ty(a), Ty::String | Ty::Dyn) => {
                let sz = self.size_or_unknown(a);
                let size = Est {
                    min: sz.min,
                    max: sz.max.saturating_mul(4),
                };
                (sz.factor(TRAVERSAL).add(args_cost), Some(size))
            }
            ("string", None, [a]) if matches!(self.ty(a), Ty::Bytes) => {
                let sz = self.size_or_unknown(a);
                let size = Est {
                    min: sz.min / 4,
                    max: sz.max,
                };
                (sz.factor(TRAVERSAL).add(args_cost), Some(size))
            }
            ("strings.quote", None, [a]) => {
                let sz = self.size_or_unknown(a);
                let size = Est {
                    min: sz.min.saturating_add(2),
                    max: sz.max.saturating_mul(2).saturating_add(2),
                };
                (sz.factor(TRAVERSAL).add(args_cost), Some(size))
            }
            ("startsWith" | "endsWith", Some(_), [a]) => (self.traversal(a).add(args_cost), None),
            ("@in", None, [_, list]) => match self.ty(list) {
                Ty::List(_) => (self.size_or_unknown(list).add(args_cost), None),
                Ty::Dyn => (
                    self.size_or_unknown(list)
                        .union(Est::fixed(1))
                        .add(args_cost),
                    None,
                ),
                _ => one,
            },
            ("matches", Some(t), [re]) => {
                let string = self.size_or_unknown(t).add(Est::fixed(1)).factor(TRAVERSAL);
                let regex = self.size_or_unknown(re).factor(REGEX);
                (string.mul(regex).add(args_cost), None)
            }
            ("contains", Some(t), [sub]) => {
                let cost = self.traversal(t).mul(self.traversal(sub));
                (cost.add(args_cost), None)
            }
            ("_&&_" | "_||_", None, [_, _]) => {
                // The right side may not run.
                let (lhs, rhs) = (costs[0], costs[1]);
                let cost = Est {
                    min: lhs.min,
                    max: lhs.max.saturating_add(rhs.max),
                };
                (cost, None)
            }
            ("_?_:_", None, [_, yes, no]) => {
                let size = self.size_or_unknown(yes).union(self.size_or_unknown(no));
                let entries = Entries::union(self.entries_of(yes), self.entries_of(no));
                self.set_entries(e, entries);
                (costs[0].add(costs[1].union(costs[2])), Some(size))
            }
            ("_+_", None, [a, b]) => self.concat(e, a, b, args_cost),
            ("_==_" | "_!=_", None, [a, b]) => (self.compare(a, b).add(args_cost), None),
            (cmp, None, [a, b]) if COMPARISONS.contains(&cmp) => match self.operand_ty([a, b]) {
                Ty::String | Ty::Bytes => (self.compare(a, b).add(args_cost), None),
                Ty::Dyn => (self.compare(a, b).union(Est::fixed(1)).add(args_cost), None),
                _ => one,
            },
            _ => one,
        }
    }

    /// Traversing a string once: a tenth of its length.
    fn traversal(&mut self, e: &IdedExpr) -> Est {
        self.size_or_unknown(e).factor(TRAVERSAL)
    }

    /// Equality, or ordering of strings: a traversal of the shorter operand.
    fn compare(&mut self, a: &IdedExpr, b: &IdedExpr) -> Est {
        let smallest = self.size_or_unknown(a).max.min(self.size_or_unknown(b).max);
        let est = Est {
            min: u64::from(smallest > 0),
            max: smallest,
        };
        est.factor(TRAVERSAL)
    }

    /// `+`: strings and bytes cost a traversal of the result, lists 1, numbers 1.
    fn concat(&mut self, e: &IdedExpr, a: &IdedExpr, b: &IdedExpr, args_cost: Est) -> CallEst {
        let ty = self.operand_ty([a, b]);
        if !matches!(ty, Ty::String | Ty::Bytes | Ty::List(_) | Ty::Dyn) {
            return (Est::fixed(1).add(args_cost), None);
        }
        let size = self.size_or_unknown(a).add(self.size_or_unknown(b));
        let entries = Entries::union(self.entries_of(a), self.entries_of(b));
        self.set_entries(e, entries);
        let cost = match ty {
            Ty::List(_) => Est::fixed(1),
            Ty::Dyn => size.factor(TRAVERSAL).union(Est::fixed(1)),
            _ => size.factor(TRAVERSAL),
        };
        (cost.add(args_cost), Some(size))
    }

    /// The Kubernetes estimator's figures (without the arguments' costs), for the functions
    /// it knows that this server offers.
    fn kubernetes(
        &mut self,
        name: &str,
        target: Option<&IdedExpr>,
        args: &[IdedExpr],
    ) -> Option<CallEst> {
        let t = target?;
        match name {
            "indexOf" | "lastIndexOf" => match self.ty(t) {
                Ty::List(elem) => {
                    let mut per_item = Est::fixed(1);
                    if matches!(*elem, Ty::String | Ty::Bytes) {
                        per_item = per_item.add(self.item_size(t).factor(TRAVERSAL));
                    }
                    Some((self.size_or_unknown(t).mul(per_item), None))
                }
                _ => Some((self.traversal(t), None)),
            },
            "lowerAscii" | "upperAscii" | "substring" | "trim" => {
                let sz = self.size_or_unknown(t);
                Some((sz.factor(TRAVERSAL), Some(sz)))
            }
            "replace" if args.len() >= 2 => {
                let sz = self.size_or_unknown(t);
                let from = self.size_or_unknown(&args[0]);
                let to = self.size_or_unknown(&args[1]);
                let size = replaced_size(sz, from, to);
                Some((sz.factor(2.0 * TRAVERSAL), Some(size)))
            }
            "split" => {
                let sz = self.size_or_unknown(t);
                let mut max = sz.max;
                if let Some(Expr::Literal(LiteralValue::Int(limit))) = args.get(1).map(|a| &a.expr)
                {
                    // As upstream: a negative limit wraps around to a huge one.
                    max = *limit.inner() as u64;
                }
                let size = Est { min: 0, max };
                Some((sz.factor(2.0 * TRAVERSAL), Some(size)))
            }
            "join" => {
                let items = self.size_or_unknown(t);
                let mut size = match self.ty(t) {
                    Ty::List(_) | Ty::Map(..) => items.mul(self.item_size(t)),
                    _ => Est::default(),
                };
                if let Some(sep) = args.first() {
                    let separators = Est {
                        min: items.min.saturating_sub(1),
                        max: items.max.saturating_sub(1),
                    };
                    size = size.add(self.size_or_unknown(sep).mul(separators));
                }
                Some((size.factor(TRAVERSAL), Some(size)))
            }
            _ => None,
        }
    }

    /// The size of one item of list `e`, from the schema when `e` reads one.
    fn item_size(&self, e: &IdedExpr) -> Est {
        let mut path = self.path(e);
        if path.is_empty() {
            return Est::UNKNOWN;
        }
        path.push("@items".to_string());
        self.size_of_path(&path).unwrap_or(Est::UNKNOWN)
    }

    fn result_type(&self, name: &str, target: Option<&IdedExpr>, args: &[IdedExpr]) -> Ty<'a> {
        let arg = |i: usize| args.get(i).map_or(Ty::Dyn, |a| self.ty(a));
        let on = target.map_or(Ty::Dyn, |t| self.ty(t));
        match name {
            "_==_"
            | "_!=_"
            | "_<_"
            | "_<=_"
            | "_>_"
            | "_>=_"
            | "_&&_"
            | "_||_"
            | "!_"
            | "@in"
            | "@not_strictly_false"
            | "matches"
            | "startsWith"
            | "endsWith"
            | "contains"
            | "hasValue"
            | "bool" => Ty::Bool,
            "size" | "int" | "indexOf" | "lastIndexOf" => Ty::Int,
            "uint" => Ty::Uint,
            "double" => Ty::Double,
            "string" | "charAt" | "lowerAscii" | "upperAscii" | "replace" | "substring"
            | "trim" | "join" | "format" | "strings.quote" => Ty::String,
            "bytes" => Ty::Bytes,
            "type" => Ty::Type,
            "split" => Ty::List(Box::new(Ty::String)),
            "_+_" => match (arg(0), arg(1)) {
                (Ty::List(a), Ty::List(b)) if a.is_dyn() => Ty::List(b),
                (Ty::Dyn, b) => b,
                (a, _) => a,
            },
            "_-_" | "_*_" | "_/_" | "_%_" | "-_" => self.operand_ty(args),
            "_?_:_" => self.operand_ty(args.iter().skip(1)),
            "_[_]" => match arg(0) {
                Ty::List(t) => *t,
                Ty::Map(_, v) => *v,
                _ => Ty::Dyn,
            },
            "optional.of" | "optional.ofNonZeroValue" => Ty::Optional(Box::new(arg(0))),
            "value" | "orValue" => match on {
                Ty::Optional(t) => *t,
                _ => Ty::Dyn,
            },
            "or" => on,
            "optional.none" | "_?._" | "_[?_]" => Ty::Optional(Box::new(Ty::Dyn)),
            _ => Ty::Dyn,
        }
    }
}

/// The size of `s.replace(from, to)`: as many replacements as can fit, the longest result and
/// the shortest (the Kubernetes estimator's reasoning).
fn replaced_size(sz: Est, from: Est, to: Est) -> Est {
    let mut count = Est::default();
    let mut kept = Est::default();
    if from.min == 0 {
        // An empty search string surrounds every character.
        count.max = sz.max.saturating_add(1);
        kept.max = sz.max;
    } else if to.max <= from.min {
        count.max = 0;
        kept.max = sz.max;
    } else {
        count.max = (sz.max as f64 / from.min as f64).ceil() as u64;
    }
    if from.max == 0 {
        count.min = sz.min.saturating_add(1);
        kept.min = sz.min;
    } else if from.max <= to.min {
        count.min = 0;
        kept.min = sz.min;
    } else {
        count.min = (sz.min as f64 / from.max as f64).ceil() as u64;
    }
    count.mul(to).add(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replace_sizes_follow_the_kubernetes_estimator() {
        // "abc".replace("", "x"): every position gets an x.
        let r = replaced_size(Est::fixed(3), Est::fixed(0), Est::fixed(1));
        assert_eq!(r, Est::fixed(7));
        // Replacing with something no longer keeps the length.
        let r = replaced_size(Est::fixed(10), Est::fixed(2), Est::fixed(1));
        assert_eq!(r.max, 10);
        // Replacing 1 character with 3 at most 10 times.
        let r = replaced_size(Est { min: 0, max: 10 }, Est::fixed(1), Est::fixed(3));
        assert_eq!(r.max, 30);
    }
}

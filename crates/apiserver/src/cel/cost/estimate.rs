//! The walk over a rule's expression that adds up its cost, as cel-go's checker estimates it:
//! each node's cost, and what later nodes need to know of it (its type, the schema path it
//! reads, its size, the sizes of its entries when it is a literal list or map). Function calls
//! are costed in `calls`.

use std::collections::HashMap;

use ::cel::common::ast::{ComprehensionExpr, EntryExpr, Expr, IdedExpr};

use super::decl::{Decl, Ty};
use super::literal::{Entries, literal_size, literal_type};
use super::{Est, Site};

/// A variable bound by a comprehension.
struct Local<'a> {
    path: Vec<String>,
    size: Option<Est>,
    entries: Option<Entries>,
    ty: Ty<'a>,
}

pub struct Coster<'a> {
    /// The rule's node: where `self` (and `oldSelf`) start.
    root: Decl<'a>,
    optional_old: bool,
    types: HashMap<u64, Ty<'a>>,
    paths: HashMap<u64, Vec<String>>,
    sizes: HashMap<u64, Est>,
    entries: HashMap<u64, Entries>,
    locals: HashMap<String, Vec<Local<'a>>>,
}

/// Names that denote types when used as identifiers.
const TYPE_NAMES: &[&str] = &[
    "int",
    "uint",
    "double",
    "string",
    "bool",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
    "dyn",
];

impl<'a> Coster<'a> {
    pub fn new(site: Site<'a>) -> Self {
        Coster {
            root: Decl::node(site.schema, site.root),
            optional_old: site.optional_old,
            types: HashMap::new(),
            paths: HashMap::new(),
            sizes: HashMap::new(),
            entries: HashMap::new(),
            locals: HashMap::new(),
        }
    }

    /// The cost of `e`, recording its type (and path, sizes) on the way.
    pub fn cost(&mut self, e: &IdedExpr) -> Est {
        let (cost, ty) = match &e.expr {
            Expr::Literal(l) => (Est::fixed(0), literal_type(l)),
            Expr::Ident(name) => self.ident(e.id, name),
            Expr::Select(s) => {
                let operand = self.cost(&s.operand);
                if s.test {
                    // `has()`: Kubernetes charges nothing for the presence test itself.
                    (operand, Ty::Bool)
                } else {
                    let on = self.ty(&s.operand);
                    let select = match on {
                        Ty::Object(_) | Ty::Map(..) => Est::fixed(1),
                        _ => Est::fixed(0),
                    };
                    let mut path = self.path(&s.operand);
                    path.push(s.field.clone());
                    self.paths.insert(e.id, path);
                    let ty = match on {
                        Ty::Object(d) => d.field(&s.field).map_or(Ty::Dyn, |f| f.ty()),
                        Ty::Map(_, v) => *v,
                        _ => Ty::Dyn,
                    };
                    (operand.add(select), ty)
                }
            }
            Expr::Call(call) => self.call(e, call),
            Expr::List(l) => {
                let mut sum = Est::default();
                let mut item = Est {
                    min: if l.elements.is_empty() { 0 } else { u64::MAX },
                    max: 0,
                };
                let mut elem = Ty::Dyn;
                for x in &l.elements {
                    sum = sum.add(self.cost(x));
                    item = item.union(self.size_or_unknown(x));
                    if elem.is_dyn() {
                        elem = self.ty(x);
                    }
                }
                let entries = Entries {
                    list: true,
                    key: Est::fixed(1),
                    val: item,
                };
                self.entries.insert(e.id, entries);
                (sum.add(Est::fixed(10)), Ty::List(Box::new(elem)))
            }
            Expr::Map(m) => {
                let empty = m.entries.is_empty();
                let start = Est {
                    min: if empty { 0 } else { u64::MAX },
                    max: 0,
                };
                let (mut sum, mut key, mut val) = (Est::default(), start, start);
                let (mut key_ty, mut val_ty) = (Ty::Dyn, Ty::Dyn);
                for entry in &m.entries {
                    if let EntryExpr::MapEntry(me) = &entry.expr {
                        sum = sum.add(self.cost(&me.key)).add(self.cost(&me.value));
                        key = key.union(self.size_or_unknown(&me.key));
                        val = val.union(self.size_or_unknown(&me.value));
                        if key_ty.is_dyn() {
                            key_ty = self.ty(&me.key);
                        }
                        if val_ty.is_dyn() {
                            val_ty = self.ty(&me.value);
                        }
                    }
                }
                let entries = Entries {
                    list: false,
                    key,
                    val,
                };
                self.entries.insert(e.id, entries);
                let ty = Ty::Map(Box::new(key_ty), Box::new(val_ty));
                (sum.add(Est::fixed(30)), ty)
            }
            Expr::Struct(s) => {
                let mut sum = Est::fixed(40);
                for entry in &s.entries {
                    if let EntryExpr::StructField(f) = &entry.expr {
                        sum = sum.add(self.cost(&f.value));
                    }
                }
                (sum, Ty::Dyn)
            }
            Expr::Comprehension(c) => self.comprehension(e.id, c),
            Expr::Unspecified => (Est::default(), Ty::Dyn),
        };
        self.types.insert(e.id, ty);
        cost
    }

    fn ident(&mut self, id: u64, name: &str) -> (Est, Ty<'a>) {
        let (path, ty) = match self.locals.get(name).and_then(|v| v.last()) {
            Some(local) => (local.path.clone(), local.ty.clone()),
            None => {
                let ty = match name {
                    "self" => self.root.ty(),
                    "oldSelf" if self.optional_old => Ty::Optional(Box::new(self.root.ty())),
                    "oldSelf" => self.root.ty(),
                    _ if TYPE_NAMES.contains(&name) => Ty::Type,
                    _ => Ty::Dyn,
                };
                (vec![name.to_string()], ty)
            }
        };
        self.paths.insert(id, path);
        (Est::fixed(1), ty)
    }

    fn comprehension(&mut self, id: u64, c: &ComprehensionExpr) -> (Est, Ty<'a>) {
        let mut sum = self.cost(&c.iter_range).add(self.cost(&c.accu_init));
        let accu = Local {
            path: self.path(&c.accu_init),
            size: self.size(&c.accu_init),
            entries: self.entries_of(&c.accu_init),
            ty: self.ty(&c.accu_init),
        };
        self.push(&c.accu_var, accu);
        match &c.iter_var2 {
            Some(v2) => {
                self.push_iter(&c.iter_var, &c.iter_range, Iter::Key);
                self.push_iter(v2, &c.iter_range, Iter::Value);
            }
            None => self.push_iter(&c.iter_var, &c.iter_range, Iter::Single),
        }
        let per_iteration = self.cost(&c.loop_cond).add(self.cost(&c.loop_step));
        self.pop(&c.iter_var);
        if let Some(v2) = &c.iter_var2 {
            self.pop(v2);
        }
        // The accumulator has the step's type once known (`[]` becomes a list of something).
        let step_ty = self.ty(&c.loop_step);
        if let Some(accu) = self.locals.get_mut(&c.accu_var).and_then(|v| v.last_mut())
            && !step_ty.is_dyn()
        {
            accu.ty = step_ty;
        }
        sum = sum.add(self.cost(&c.result));
        self.pop(&c.accu_var);
        let range = self.size_or_unknown(&c.iter_range);
        sum = sum.add(range.mul(per_iteration));
        match &c.accu_init.expr {
            Expr::Literal(_) => {
                if let Some(size) = self.size(&c.accu_init) {
                    self.sizes.insert(id, size);
                }
            }
            Expr::List(_) | Expr::Map(_) => {
                self.sizes.insert(id, range);
                if let Some(entries) = self.entries_of(&c.loop_step) {
                    self.entries.insert(id, entries);
                }
            }
            _ => {}
        }
        (sum, self.ty(&c.result))
    }

    fn push_iter(&mut self, var: &str, range: &IdedExpr, kind: Iter) {
        let entries = self.entries_of(range);
        let range_ty = self.ty(range);
        let list = match entries {
            Some(e) => e.list,
            None => matches!(range_ty, Ty::List(_)),
        };
        let (step, size, ty) = match (kind, list) {
            (Iter::Single | Iter::Value, true) => {
                let elem = match &range_ty {
                    Ty::List(t) => (**t).clone(),
                    _ => Ty::Dyn,
                };
                ("@items", entries.map(|e| e.val), elem)
            }
            (Iter::Key, true) => ("@indices", entries.map(|e| e.key), Ty::Int),
            (Iter::Single | Iter::Key, false) => {
                let key = match &range_ty {
                    Ty::Map(k, _) => (**k).clone(),
                    _ => Ty::Dyn,
                };
                ("@keys", entries.map(|e| e.key), key)
            }
            (Iter::Value, false) => {
                let val = match &range_ty {
                    Ty::Map(_, v) => (**v).clone(),
                    _ => Ty::Dyn,
                };
                ("@values", entries.map(|e| e.val), val)
            }
        };
        let mut path = self.path(range);
        path.push(step.to_string());
        let local = Local {
            path,
            size,
            entries: None,
            ty,
        };
        self.push(var, local);
    }

    fn push(&mut self, var: &str, local: Local<'a>) {
        self.locals.entry(var.to_string()).or_default().push(local);
    }

    fn pop(&mut self, var: &str) {
        if let Some(stack) = self.locals.get_mut(var) {
            stack.pop();
        }
    }

    pub fn ty(&self, e: &IdedExpr) -> Ty<'a> {
        self.types.get(&e.id).cloned().unwrap_or(Ty::Dyn)
    }

    /// The schema path `e` reads, starting with a variable (empty when it reads none).
    pub fn path(&self, e: &IdedExpr) -> Vec<String> {
        if let Expr::Ident(name) = &e.expr
            && let Some(local) = self.locals.get(name).and_then(|v| v.last())
        {
            return local.path.clone();
        }
        self.paths.get(&e.id).cloned().unwrap_or_default()
    }

    pub fn set_path(&mut self, e: &IdedExpr, path: Vec<String>) {
        self.paths.insert(e.id, path);
    }

    pub fn set_size(&mut self, e: &IdedExpr, size: Option<Est>) {
        if let Some(size) = size {
            self.sizes.insert(e.id, size);
        }
    }

    pub fn set_entries(&mut self, e: &IdedExpr, entries: Option<Entries>) {
        if let Some(entries) = entries {
            self.entries.insert(e.id, entries);
        }
    }

    pub fn entries_of(&self, e: &IdedExpr) -> Option<Entries> {
        if let Some(entries) = self.entries.get(&e.id) {
            return Some(*entries);
        }
        match &e.expr {
            Expr::Ident(name) => self
                .locals
                .get(name)
                .and_then(|v| v.last())
                .and_then(|l| l.entries),
            _ => None,
        }
    }

    /// The size of `e` when known: computed earlier, a literal's, the schema's for the path it
    /// reads, 1 for scalars, or a bound variable's.
    pub fn size(&mut self, e: &IdedExpr) -> Option<Est> {
        if let Some(size) = self.sizes.get(&e.id) {
            return Some(*size);
        }
        if let Some(size) = literal_size(e) {
            return Some(size);
        }
        if let Some(size) = self.size_of_path(&self.path(e)) {
            self.sizes.insert(e.id, size);
            return Some(size);
        }
        if self.ty(e).is_scalar() {
            return Some(Est::fixed(1));
        }
        match &e.expr {
            Expr::Ident(name) => self
                .locals
                .get(name)
                .and_then(|v| v.last())
                .and_then(|l| l.size),
            _ => None,
        }
    }

    pub fn size_or_unknown(&mut self, e: &IdedExpr) -> Est {
        self.size(e).unwrap_or(Est::UNKNOWN)
    }

    /// Upstream's size estimator: the path's first step (the variable) is skipped and the rest
    /// is looked up from the rule's node, whatever the variable.
    pub fn size_of_path(&self, path: &[String]) -> Option<Est> {
        let (_, rest) = path.split_first()?;
        self.root.size_at(rest).map(|max| Est { min: 0, max })
    }

    pub fn set_type(&mut self, e: &IdedExpr, ty: Ty<'a>) {
        self.types.insert(e.id, ty);
    }
}

#[derive(Clone, Copy)]
enum Iter {
    Single,
    Key,
    Value,
}

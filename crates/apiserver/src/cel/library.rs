//! The CEL environment rules are compiled and run in, and which functions it offers. The `cel`
//! crate's standard library (operators, `size`, `int`/`uint`/`double`/`string`/`bool`/
//! `bytes`/`type`/`dyn`, `matches`, `startsWith`, `endsWith`, `contains`, `in`, optionals)
//! and macros (`has`, `all`, `exists`, `exists_one`, `map`, `filter`), plus its strings
//! extension (the functions of cel-go's `ext.Strings` that Kubernetes enables). A rule calling
//! anything else is refused when its CRD is written, never left to fail (or pass) later.

use std::sync::{Arc, LazyLock};

use ::cel::Env;

static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    // Only fails when a name is declared twice, which the stdlib does not do.
    let _ = env.add_extension(::cel::extensions::strings);
    Arc::new(env)
});

/// The shared environment.
pub fn env() -> Arc<Env> {
    Arc::clone(&ENV)
}

/// Functions and methods of the standard library and the strings extension.
const SUPPORTED: &[&str] = &[
    // standard library
    "size",
    "int",
    "uint",
    "double",
    "string",
    "bool",
    "bytes",
    "type",
    "dyn",
    "matches",
    "startsWith",
    "endsWith",
    "contains",
    // optionals
    "optional.of",
    "optional.none",
    "optional.ofNonZeroValue",
    "hasValue",
    "value",
    "orValue",
    "or",
    // strings extension
    "charAt",
    "indexOf",
    "lastIndexOf",
    "join",
    "lowerAscii",
    "upperAscii",
    "replace",
    "split",
    "substring",
    "trim",
    "format",
    "strings.quote",
];

/// Functions of the Kubernetes CEL libraries (and CEL's `duration`/`timestamp`) that this
/// server does not implement, named in the refusal so the gap is obvious.
const KUBERNETES_ONLY: &[&str] = &[
    "duration",
    "timestamp",
    "getFullYear",
    "getMonth",
    "getDayOfMonth",
    "getDayOfWeek",
    "getDayOfYear",
    "getDate",
    "getHours",
    "getMinutes",
    "getSeconds",
    "getMilliseconds",
    "isSorted",
    "sum",
    "min",
    "max",
    "find",
    "findAll",
    "url",
    "isURL",
    "getScheme",
    "getHost",
    "getHostname",
    "getPort",
    "getEscapedPath",
    "getQuery",
    "quantity",
    "isQuantity",
    "asInteger",
    "asApproximateFloat",
    "isInteger",
    "sign",
    "add",
    "sub",
    "isLessThan",
    "isGreaterThan",
    "compareTo",
    "ip",
    "isIP",
    "cidr",
    "isCIDR",
    "family",
    "isUnspecified",
    "isLoopback",
    "isLinkLocalMulticast",
    "isLinkLocalUnicast",
    "isGlobalUnicast",
    "ip.isCanonical",
    "containsIP",
    "containsCIDR",
    "masked",
    "prefixLength",
    "semver",
    "isSemver",
    "major",
    "minor",
    "patch",
    "sets.contains",
    "sets.equivalent",
    "sets.intersects",
    "slice",
    "flatten",
    "distinct",
    "reverse",
    "sort",
    "sortBy",
    "lists.range",
    "transformList",
    "transformMap",
    "transformMapEntry",
    "format.named",
    "validate",
    "base64.encode",
    "base64.decode",
    "math.greatest",
    "math.least",
    "cel.bind",
];

/// Why a called function cannot be used, or `None` when it can.
pub fn unsupported(function: &str) -> Option<String> {
    // Operators and internal helpers of macros: `_==_`, `!_`, `-_`, `@in`, `@not_strictly_false`.
    if function.starts_with('_')
        || function.starts_with('@')
        || function.starts_with('!')
        || function.starts_with('-')
        || SUPPORTED.contains(&function)
    {
        return None;
    }
    if KUBERNETES_ONLY.contains(&function) {
        return Some(format!(
            "function '{function}' is not supported by the embedded API server"
        ));
    }
    Some(format!(
        "ERROR: <input>: undeclared reference to '{function}' (in container '')"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::cel::{Context, ExecutionError, Value};

    /// Every function declared supported resolves in the environment (a wrong argument type is
    /// fine, an undeclared reference is not).
    #[test]
    fn supported_functions_resolve() {
        for f in SUPPORTED {
            let src = match *f {
                "optional.of" | "optional.ofNonZeroValue" => format!("{f}(1)"),
                "optional.none" => format!("{f}()"),
                "strings.quote" => format!("{f}('x')"),
                "hasValue" | "value" | "orValue" | "or" => {
                    format!("optional.of(1).{f}(optional.of(1))")
                }
                "size" | "int" | "uint" | "double" | "string" | "bool" | "bytes" | "type"
                | "dyn" => format!("{f}('x')"),
                _ => format!("'x'.{f}('x')"),
            };
            let program = env().compile(&src).unwrap();
            let result = program.execute(&Context::with_env(env()));
            assert!(
                !matches!(result, Err(ExecutionError::UndeclaredReference(_))),
                "{src}: {result:?}"
            );
        }
    }

    #[test]
    fn unknown_and_kubernetes_only_functions_are_named() {
        assert_eq!(unsupported("_==_"), None);
        assert_eq!(unsupported("matches"), None);
        assert!(unsupported("quantity").unwrap().contains("not supported"));
        assert!(
            unsupported("foo")
                .unwrap()
                .contains("undeclared reference to 'foo'")
        );
        let program = env().compile("'a-b'.split('-').size() == 2").unwrap();
        assert_eq!(
            program.execute(&Context::with_env(env())),
            Ok(Value::Bool(true))
        );
    }
}

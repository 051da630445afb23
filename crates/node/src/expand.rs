//! Kubelet's `$(VAR)` expansion for env values, command and args: `$(NAME)` becomes the
//! variable's value when it is defined and stays as written otherwise; `$$` is a literal `$`.

/// Expands `$(VAR)` references in `input` using `lookup`.
pub fn expand(input: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut checkpoint = 0;
    let mut cursor = 0;
    while cursor < bytes.len() {
        if bytes[cursor] == b'$' && cursor + 1 < bytes.len() {
            out.push_str(&input[checkpoint..cursor]);
            let rest = &input[cursor + 1..];
            let (text, advance) = match rest.as_bytes()[0] {
                b'$' => ("$".to_string(), 1),
                b'(' => match rest.find(')') {
                    Some(end) => {
                        let name = &rest[1..end];
                        let value = lookup(name).unwrap_or_else(|| format!("$({name})"));
                        (value, end + 1)
                    }
                    None => ("$(".to_string(), 1),
                },
                _ => {
                    let ch = rest.chars().next().map(String::from).unwrap_or_default();
                    let len = ch.len();
                    (format!("${ch}"), len)
                }
            };
            out.push_str(&text);
            cursor += advance;
            checkpoint = cursor + 1;
        }
        cursor += 1;
    }
    if checkpoint <= input.len() {
        out.push_str(&input[checkpoint.min(input.len())..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "POD_IP" => Some("127.1.0.7".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn expands_like_kubelet() {
        let cases = [
            ("http://$(POD_IP):2379", "http://127.1.0.7:2379"),
            ("$(UNDEFINED)", "$(UNDEFINED)"),
            ("$$(POD_IP)", "$(POD_IP)"),
            ("$$$(POD_IP)", "$127.1.0.7"),
            ("a$(EMPTY)b", "ab"),
            ("$(POD_IP", "$(POD_IP"),
            ("cost $5", "cost $5"),
            ("trailing $", "trailing $"),
            ("$(POD_IP)$(POD_IP)", "127.1.0.7127.1.0.7"),
            ("ünï $(POD_IP) ç", "ünï 127.1.0.7 ç"),
            ("$ü", "$ü"),
            ("", ""),
        ];
        for (input, want) in cases {
            assert_eq!(expand(input, env), want, "input {input:?}");
        }
    }
}

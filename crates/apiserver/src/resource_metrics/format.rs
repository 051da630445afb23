//! (pure) How metrics-server writes its figures: CPU as a decimal quantity of nanocores and
//! memory as a binary quantity of bytes, both in `resource.Quantity`'s canonical form
//! (`250m`, `1500u`, `136412525n`; `1276852Ki`, `2Mi`, `1000`), and the window as Go's
//! `time.Duration` prints it (`15.003s`, `1m0.5s`, `500ms`).

use jiff::SignedDuration;

/// Nanocores in canonical decimal form: trailing zeros taken off in steps of three digits.
pub fn cpu(nanocores: u64) -> String {
    if nanocores == 0 {
        return "0".into();
    }
    const SUFFIXES: [&str; 10] = ["n", "u", "m", "", "k", "M", "G", "T", "P", "E"];
    let (mut mantissa, mut step) = (nanocores, 0);
    while mantissa.is_multiple_of(1000) && step + 1 < SUFFIXES.len() {
        mantissa /= 1000;
        step += 1;
    }
    format!("{mantissa}{}", SUFFIXES[step])
}

/// Bytes in canonical binary form: below 1024 as a plain number, else the largest power of
/// 1024 that divides it exactly.
pub fn memory(bytes: u64) -> String {
    if bytes < 1024 {
        return bytes.to_string();
    }
    const SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let (mut mantissa, mut step) = (bytes, 0);
    while mantissa.is_multiple_of(1024) && step + 1 < SUFFIXES.len() {
        mantissa /= 1024;
        step += 1;
    }
    format!("{mantissa}{}", SUFFIXES[step])
}

/// A duration as Go's `time.Duration.String()` writes it.
pub fn go_duration(d: SignedDuration) -> String {
    let sign = if d.is_negative() { "-" } else { "" };
    let nanos = d.as_nanos().unsigned_abs();
    if nanos == 0 {
        return "0s".into();
    }
    if nanos < 1_000 {
        return format!("{sign}{nanos}ns");
    }
    if nanos < 1_000_000 {
        return format!("{sign}{}µs", fraction(nanos, 1_000));
    }
    if nanos < 1_000_000_000 {
        return format!("{sign}{}ms", fraction(nanos, 1_000_000));
    }
    let secs = nanos / 1_000_000_000;
    let sub = nanos % 1_000_000_000;
    let (h, m, s) = (secs / 3600, (secs / 60) % 60, secs % 60);
    let seconds = fraction(s * 1_000_000_000 + sub, 1_000_000_000);
    match (h, m) {
        (0, 0) => format!("{sign}{seconds}s"),
        (0, m) => format!("{sign}{m}m{seconds}s"),
        (h, m) => format!("{sign}{h}h{m}m{seconds}s"),
    }
}

/// `n / unit` with the decimals that are not zero.
fn fraction(n: u128, unit: u128) -> String {
    let whole = n / unit;
    let rest = n % unit;
    if rest == 0 {
        return whole.to_string();
    }
    let digits = unit.to_string().len() - 1;
    let decimals = format!("{rest:0digits$}");
    format!("{whole}.{}", decimals.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_are_canonical() {
        assert_eq!(cpu(0), "0");
        assert_eq!(cpu(136_412_525), "136412525n");
        assert_eq!(cpu(1_500_000), "1500u");
        assert_eq!(cpu(250_000_000), "250m");
        assert_eq!(cpu(2_500_000_000), "2500m");
        assert_eq!(cpu(2_000_000_000), "2");
        assert_eq!(memory(1000), "1000");
        assert_eq!(memory(1_295_724_544), "1265356Ki");
        assert_eq!(memory(2 * 1024 * 1024), "2Mi");
        assert_eq!(memory(1025), "1025");
    }

    #[test]
    fn durations_print_as_go_does() {
        let ms = SignedDuration::from_millis;
        assert_eq!(go_duration(ms(15_003)), "15.003s");
        assert_eq!(go_duration(ms(60_500)), "1m0.5s");
        assert_eq!(go_duration(ms(500)), "500ms");
        assert_eq!(go_duration(ms(3_600_000)), "1h0m0s");
        assert_eq!(go_duration(SignedDuration::ZERO), "0s");
        assert_eq!(go_duration(SignedDuration::from_micros(1500)), "1.5ms");
    }
}

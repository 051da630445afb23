//! Defaults and the few checks of batch/v1 Jobs and CronJobs that clients notice. Job:
//! `parallelism`/`completions` (both 1 when neither is set), `backoffLimit: 6`,
//! `completionMode: NonIndexed`, `suspend: false`, `podReplacementPolicy`, and unless
//! `manualSelector` the generated selector (`batch.kubernetes.io/controller-uid`) with the four
//! Job labels on the Pod template. CronJob: `concurrencyPolicy: Allow`, `suspend: false`,
//! history limits 3 and 1; the schedule and time zone must parse. Both: Pod template defaults,
//! and the template's `restartPolicy` must be `OnFailure` or `Never`.

use serde_json::{Value, json};

use super::{default_str, pod};
use crate::controllers::cron;
use crate::meta;
use crate::status::Cause;

/// Pod defaults for the template at `path` (e.g. `spec.template`), with the causes' fields
/// under it, and the Job rule on `restartPolicy`.
fn template(obj: &mut Value, path: &str) -> Vec<Cause> {
    let mut wrapper =
        json!({"spec": meta::get_path(obj, &format!("{path}.spec")).cloned().unwrap_or(json!({}))});
    let mut causes: Vec<Cause> = pod(&mut wrapper)
        .into_iter()
        .map(|mut c| {
            c.field = format!("{path}.{}", c.field);
            c
        })
        .collect();
    let restart = wrapper["spec"]["restartPolicy"].clone();
    if !matches!(restart.as_str(), Some("OnFailure" | "Never")) {
        causes.push(Cause::not_supported(
            &format!("{path}.spec.restartPolicy"),
            &restart,
            &[json!("OnFailure"), json!("Never")],
        ));
    }
    meta::set_path(obj, &format!("{path}.spec"), wrapper["spec"].take());
    causes
}

pub fn job(obj: &mut Value) -> Vec<Cause> {
    if !obj.get("spec").is_some_and(Value::is_object) {
        obj["spec"] = json!({});
    }
    let name = meta::name(obj).unwrap_or_default().to_string();
    let uid = meta::uid(obj).unwrap_or_default().to_string();
    let Some(spec) = obj.get_mut("spec") else {
        return Vec::new();
    };
    if spec.get("completions").is_none() && spec.get("parallelism").is_none() {
        spec["completions"] = json!(1);
    }
    if spec.get("parallelism").is_none() {
        spec["parallelism"] = json!(1);
    }
    if spec.get("backoffLimit").is_none() && spec.get("backoffLimitPerIndex").is_none() {
        spec["backoffLimit"] = json!(6);
    }
    default_str(spec, "completionMode", "NonIndexed");
    if spec.get("suspend").is_none() {
        spec["suspend"] = json!(false);
    }
    let replacement = if spec.get("podFailurePolicy").is_some() {
        "Failed"
    } else {
        "TerminatingOrFailed"
    };
    default_str(spec, "podReplacementPolicy", replacement);
    if spec.get("manualSelector").and_then(Value::as_bool) != Some(true) {
        spec["selector"] = json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}});
        let labels = meta::meta_mut(&mut spec["template"])
            .entry("labels")
            .or_insert_with(|| json!({}));
        if let Value::Object(l) = labels {
            for (k, v) in [
                ("batch.kubernetes.io/controller-uid", &uid),
                ("batch.kubernetes.io/job-name", &name),
                ("controller-uid", &uid),
                ("job-name", &name),
            ] {
                l.insert(k.into(), json!(v));
            }
        }
    }
    template(obj, "spec.template")
}

pub fn cronjob(obj: &mut Value) -> Vec<Cause> {
    if !obj.get("spec").is_some_and(Value::is_object) {
        obj["spec"] = json!({});
    }
    let mut causes = Vec::new();
    if let Some(spec) = obj.get_mut("spec") {
        default_str(spec, "concurrencyPolicy", "Allow");
        for (k, v) in [
            ("suspend", json!(false)),
            ("successfulJobsHistoryLimit", json!(3)),
            ("failedJobsHistoryLimit", json!(1)),
        ] {
            if spec.get(k).is_none() {
                spec[k] = v;
            }
        }
        match spec.get("schedule").and_then(Value::as_str) {
            None | Some("") => causes.push(Cause::required("spec.schedule")),
            Some(s) => {
                if let Err(e) = cron::parse(s) {
                    causes.push(Cause::invalid("spec.schedule", &json!(s), &e));
                }
            }
        }
        if let Some(tz) = spec.get("timeZone").and_then(Value::as_str)
            && jiff::tz::TimeZone::get(tz).is_err()
        {
            causes.push(Cause::invalid(
                "spec.timeZone",
                &json!(tz),
                &format!("unknown time zone {tz}"),
            ));
        }
    }
    causes.extend(template(obj, "spec.jobTemplate.spec.template"));
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_defaults_selector_and_labels() {
        let mut j = json!({"metadata": {"name": "j", "uid": "u1"}, "spec": {"template": {
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox:1"}]}}}});
        assert!(job(&mut j).is_empty());
        let s = &j["spec"];
        assert_eq!(
            (s["completions"].clone(), s["parallelism"].clone()),
            (json!(1), json!(1))
        );
        assert_eq!(s["backoffLimit"], 6);
        assert_eq!(s["podReplacementPolicy"], "TerminatingOrFailed");
        assert_eq!(
            s["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"],
            "u1"
        );
        assert_eq!(s["template"]["metadata"]["labels"]["job-name"], "j");
        assert_eq!(s["template"]["spec"]["dnsPolicy"], "ClusterFirst");
        let mut only_parallel = json!({"metadata": {"name": "j"}, "spec": {"parallelism": 3, "template": {
            "spec": {"restartPolicy": "OnFailure", "containers": [{"name": "c", "image": "x"}]}}}});
        job(&mut only_parallel);
        assert!(
            only_parallel["spec"].get("completions").is_none(),
            "a work queue"
        );
    }

    #[test]
    fn invalid_templates_and_schedules() {
        let mut j = json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}});
        let causes = job(&mut j);
        assert_eq!(causes[0].field, "spec.template.spec.restartPolicy");
        assert_eq!(
            causes[0].message,
            "Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\""
        );
        let mut c = json!({"metadata": {"name": "c"}, "spec": {"schedule": "* * *", "timeZone": "Mars/Olympus",
            "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}}}}}});
        let causes = cronjob(&mut c);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["spec.schedule", "spec.timeZone"]);
        assert_eq!(c["spec"]["successfulJobsHistoryLimit"], 3);
    }
}

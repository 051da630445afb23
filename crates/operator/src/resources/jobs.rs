//! Jobs: how one ended.

use k8s_openapi::api::batch::v1::Job;

/// Whether a Job finished, and how: `Some(Ok(()))` complete, `Some(Err(why))` failed.
pub fn job_outcome(job: &Job) -> Option<Result<(), String>> {
    let conditions = job.status.as_ref()?.conditions.as_ref()?;
    for c in conditions.iter().filter(|c| c.status == "True") {
        match c.type_.as_str() {
            "Complete" => return Some(Ok(())),
            "Failed" => {
                return Some(Err(format!(
                    "{}: {}",
                    c.reason.as_deref().unwrap_or("Failed"),
                    c.message.as_deref().unwrap_or("the Job failed")
                )));
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};

    fn job(type_: &str, status: &str) -> Job {
        Job {
            status: Some(JobStatus {
                conditions: Some(vec![JobCondition {
                    type_: type_.into(),
                    status: status.into(),
                    reason: Some("BackoffLimitExceeded".into()),
                    message: Some("Job has reached the specified backoff limit".into()),
                    ..JobCondition::default()
                }]),
                ..JobStatus::default()
            }),
            ..Job::default()
        }
    }

    #[test]
    fn a_job_is_done_when_a_condition_says_so() {
        assert_eq!(job_outcome(&Job::default()), None);
        assert_eq!(job_outcome(&job("Complete", "True")), Some(Ok(())));
        assert_eq!(job_outcome(&job("Complete", "False")), None);
        let failed = job_outcome(&job("Failed", "True")).unwrap().unwrap_err();
        assert!(failed.starts_with("BackoffLimitExceeded: "), "{failed}");
    }
}

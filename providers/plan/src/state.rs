//! The plan of one session: its goal, its steps, the review state of each part, and how it
//! is kept in `.toolbox/sessions/<sid>/plan.json` (opened and replaced without following any
//! link, written atomically).

use std::ffi::OsStr;
use std::io::Read;

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use toolbox_core::Vocabulary;
use toolbox_host::Workspace;

/// The file's name in the session's folder.
pub const FILE: &str = "plan.json";
/// A plan file larger than this is refused (a plan is a few kilobytes).
const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// Limits on what a model may store.
pub const MAX_GOAL_CHARS: usize = 8000;
/// The longest step title.
pub const MAX_TITLE_CHARS: usize = 500;
/// The longest step note.
pub const MAX_NOTE_CHARS: usize = 2000;
/// The most steps a plan holds.
pub const MAX_STEPS: usize = 100;

/// A step's progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Not started.
    #[default]
    Pending,
    /// Being worked on; at most one step at a time.
    InProgress,
    /// Done.
    Completed,
    /// Cannot go on (the note says why).
    Blocked,
}

impl Status {
    /// The names a model may give.
    pub const NAMES: &'static [&'static str] = &["pending", "in_progress", "completed", "blocked"];

    /// Parses a status a model gave.
    pub fn parse(s: &str) -> Option<Status> {
        match s {
            "pending" => Some(Status::Pending),
            "in_progress" => Some(Status::InProgress),
            "completed" => Some(Status::Completed),
            "blocked" => Some(Status::Blocked),
            _ => None,
        }
    }

    /// The name, as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::InProgress => "in_progress",
            Status::Completed => "completed",
            Status::Blocked => "blocked",
        }
    }

    fn mark(self) -> &'static str {
        match self {
            Status::Pending => "[ ]",
            Status::InProgress => "[>]",
            Status::Completed => "[x]",
            Status::Blocked => "[!]",
        }
    }
}

/// One step of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// Its id, given by the plan (`1`, `2`, …), stable while the step exists.
    pub id: String,
    /// What the step does.
    pub title: String,
    /// Its progress.
    pub status: Status,
    /// An optional note (why it is blocked, what was found).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Where a part stands with the person who reviews it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ReviewState {
    /// Not confirmed: never asked, rejected, or changed since it was confirmed.
    #[default]
    Draft,
    /// Asked, no answer yet.
    Pending,
    /// A person confirmed it.
    Confirmed,
}

impl ReviewState {
    /// The name, as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            ReviewState::Draft => "draft",
            ReviewState::Pending => "pending",
            ReviewState::Confirmed => "confirmed",
        }
    }
}

/// The review of one part (the goal or the plan).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Review {
    /// Where it stands.
    pub state: ReviewState,
    /// Who answered last (the front end that carried the person's answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// When, RFC 3339 UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// What the person wrote with their last answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<String>,
    /// Counts the changes of the part's content: an answer given about an older revision
    /// confirms nothing.
    #[serde(default)]
    pub revision: u64,
    /// The seal toolbox put on this review when it wrote it (see [`SEAL_PURPOSE`]): an
    /// HMAC over the session, the part, this review and a digest of the part's content,
    /// under a key no tool can reach. A review that is not a draft counts only with a valid
    /// seal; without one it is read as a draft ([`Review::unsealed`] says so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seal: Option<String>,
    /// Set when the file said more than its seal bears out (a confirmation written by
    /// something other than toolbox, or a part edited after it was confirmed): the review
    /// was read as a draft. Never stored.
    #[serde(skip)]
    pub unsealed: bool,
}

/// What review seals are made for (domain separation from any other use of the key).
pub const SEAL_PURPOSE: &str = "toolbox plan review v1";

impl Review {
    /// A change of the part's content: a new revision, and a confirmation (or a question
    /// waiting) no longer holds. Returns what to tell the model, if the state changed.
    fn changed(&mut self, part: Part, said_in: Vocabulary) -> Option<String> {
        self.revision += 1;
        let was = self.state;
        self.state = ReviewState::Draft;
        match was {
            ReviewState::Draft => None,
            ReviewState::Pending => Some(format!(
                "the {part} changed while its review was pending, so it is a draft again: an \
                 answer to the old {part} will not confirm it; call {} again",
                review_tool(said_in, part)
            )),
            ReviewState::Confirmed => Some(format!(
                "the {part} was confirmed, and changed, so it is a draft again: call {} to \
                 have it confirmed",
                review_call(said_in, part)
            )),
        }
    }

    fn describe(&self, part: Part, said_in: Vocabulary) -> String {
        if self.unsealed {
            return format!(
                "not confirmed: the file claimed more than toolbox recorded; a confirmation \
                 is made by a person through {}, and any edit of the part undoes it",
                review_tool(said_in, part)
            );
        }
        // In words a person reads at a glance: "draft" beside a confirmed checklist read as
        // "not approved" (issue 38).
        let answered = match (&self.by, &self.at) {
            (Some(by), Some(at)) => Some(format!("{by} at {at}")),
            _ => None,
        };
        match (self.state, answered) {
            (ReviewState::Draft, None) => "not yet reviewed".to_string(),
            (ReviewState::Draft, Some(last)) => {
                format!("needs another review; last answered by {last}")
            }
            (ReviewState::Pending, _) => "waiting for a person's review".to_string(),
            (ReviewState::Confirmed, Some(last)) => format!("confirmed by {last}"),
            (ReviewState::Confirmed, None) => "confirmed".to_string(),
        }
    }
}

/// A part a person reviews.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Part {
    /// The goal.
    Goal,
    /// The steps (the default part the gate wants confirmed).
    #[default]
    Plan,
}

impl Part {
    /// Parses `goal` or `plan`.
    pub fn parse(s: &str) -> Option<Part> {
        match s {
            "goal" => Some(Part::Goal),
            "plan" => Some(Part::Plan),
            _ => None,
        }
    }
}

impl std::fmt::Display for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Part::Goal => "goal",
            Part::Plan => "plan",
        })
    }
}

/// The plan of one session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Plan {
    /// What the work is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    /// The steps, in order.
    #[serde(default)]
    pub steps: Vec<Step>,
    /// The goal's review.
    #[serde(default)]
    pub goal_review: Review,
    /// The steps' review.
    #[serde(default)]
    pub plan_review: Review,
    /// The number the next new step's id gets.
    #[serde(default)]
    pub next_id: u64,
    /// The vocabulary the model was shown the tools in: the plan's text names the plan's
    /// tools in it ([`set_call`], [`review_call`]). Never stored; canonical when loaded.
    #[serde(skip)]
    pub said_in: Vocabulary,
}

/// The tool that sets `part` (both parts when `None`), as a model prompted in `vocabulary`
/// knows it: `plan__set`, or the data agent's `data_agent_prepare_generation_goal` / `…_plan`.
pub fn set_call(vocabulary: Vocabulary, part: Option<Part>) -> String {
    use crate::data_agent::{PREPARE_GOAL, PREPARE_PLAN};
    match (vocabulary, part) {
        (Vocabulary::DataAgent, Some(Part::Goal)) => PREPARE_GOAL.into(),
        (Vocabulary::DataAgent, Some(Part::Plan)) => PREPARE_PLAN.into(),
        (Vocabulary::DataAgent, None) => format!("{PREPARE_GOAL} and {PREPARE_PLAN}"),
        (Vocabulary::Canonical, _) => "plan__set".into(),
    }
}

/// The tool that asks a person to confirm `part`, as a model prompted in `vocabulary` knows
/// it: `plan__request_review`, or `data_agent_confirm_generation_goal` / `…_plan`.
pub fn review_tool(vocabulary: Vocabulary, part: Part) -> &'static str {
    use crate::data_agent::{CONFIRM_GOAL, CONFIRM_PLAN};
    match (vocabulary, part) {
        (Vocabulary::DataAgent, Part::Goal) => CONFIRM_GOAL,
        (Vocabulary::DataAgent, Part::Plan) => CONFIRM_PLAN,
        (Vocabulary::Canonical, _) => "plan__request_review",
    }
}

/// The call that asks a person to confirm `part`, as a model prompted in `vocabulary` makes
/// it: `plan__request_review with part "plan"`, or `data_agent_confirm_generation_plan`.
pub fn review_call(vocabulary: Vocabulary, part: Part) -> String {
    match vocabulary {
        Vocabulary::DataAgent => review_tool(vocabulary, part).into(),
        Vocabulary::Canonical => format!("plan__request_review with part \"{part}\""),
    }
}

impl Plan {
    /// The review of `part`.
    pub fn review(&self, part: Part) -> &Review {
        match part {
            Part::Goal => &self.goal_review,
            Part::Plan => &self.plan_review,
        }
    }

    /// The review of `part`, to change.
    pub fn review_mut(&mut self, part: Part) -> &mut Review {
        match part {
            Part::Goal => &mut self.goal_review,
            Part::Plan => &mut self.plan_review,
        }
    }

    /// A digest of what a person reviews in `part`: the goal's text, or every step's id and
    /// title (statuses and notes are progress, not what was agreed).
    pub fn content_digest(&self, part: Part) -> String {
        match part {
            Part::Goal => {
                toolbox_host::seal::digest(&[self.goal.as_deref().unwrap_or("").as_bytes()])
            }
            Part::Plan => {
                let parts: Vec<&[u8]> = self
                    .steps
                    .iter()
                    .flat_map(|s| [s.id.as_bytes(), s.title.as_bytes()])
                    .collect();
                toolbox_host::seal::digest(&parts)
            }
        }
    }

    /// The parts a review's seal covers.
    fn sealed_parts(&self, sid: &str, part: Part) -> Vec<Vec<u8>> {
        let review = self.review(part);
        let opt = |v: &Option<String>| v.clone().unwrap_or_default().into_bytes();
        vec![
            sid.as_bytes().to_vec(),
            part.to_string().into_bytes(),
            review.state.as_str().as_bytes().to_vec(),
            review.revision.to_string().into_bytes(),
            opt(&review.by),
            opt(&review.at),
            opt(&review.feedback),
            self.content_digest(part).into_bytes(),
        ]
    }

    /// Seals every review that is not a draft, for writing.
    fn seal_reviews(&mut self, sid: &str, seal: &toolbox_host::seal::Seal) {
        for part in [Part::Goal, Part::Plan] {
            let tag = (self.review(part).state != ReviewState::Draft).then(|| {
                let parts = self.sealed_parts(sid, part);
                let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
                seal.sign(SEAL_PURPOSE, &refs)
            });
            let review = self.review_mut(part);
            review.seal = tag;
            review.unsealed = false;
        }
    }

    /// Reads every review that is not a draft as a draft unless its seal holds: for this
    /// session, this part, this review and the part's content as it is now.
    fn check_seals(&mut self, sid: &str, seal: &toolbox_host::seal::Seal) {
        for part in [Part::Goal, Part::Plan] {
            if self.review(part).state == ReviewState::Draft {
                continue;
            }
            let parts = self.sealed_parts(sid, part);
            let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
            let holds = self
                .review(part)
                .seal
                .as_deref()
                .is_some_and(|tag| seal.verify(SEAL_PURPOSE, &refs, tag));
            if !holds {
                let review = self.review_mut(part);
                review.state = ReviewState::Draft;
                review.by = None;
                review.at = None;
                review.feedback = None;
                review.seal = None;
                review.unsealed = true;
            }
        }
    }

    /// Whether the plan holds nothing.
    pub fn is_empty(&self) -> bool {
        self.goal.is_none() && self.steps.is_empty()
    }

    /// Sets the goal; a different goal withdraws its confirmation (the notice says so).
    pub fn set_goal(&mut self, goal: String) -> Option<String> {
        if self.goal.as_deref() == Some(goal.as_str()) {
            return None;
        }
        self.goal = Some(goal);
        self.goal_review.changed(Part::Goal, self.said_in)
    }

    /// A fresh id for a new step.
    pub fn new_id(&mut self) -> String {
        self.next_id = self.next_id.max(self.steps.len() as u64) + 1;
        while self.steps.iter().any(|s| s.id == self.next_id.to_string()) {
            self.next_id += 1;
        }
        self.next_id.to_string()
    }

    /// Records that the steps changed (added, removed, retitled): the plan's confirmation
    /// is withdrawn.
    pub fn steps_changed(&mut self) -> Option<String> {
        self.plan_review.changed(Part::Plan, self.said_in)
    }

    /// Refuses a plan with more than one step in progress, naming them.
    pub fn check_one_in_progress(&self) -> Result<()> {
        let busy: Vec<&str> = self
            .steps
            .iter()
            .filter(|s| s.status == Status::InProgress)
            .map(|s| s.id.as_str())
            .collect();
        if busy.len() > 1 {
            bail!(
                "at most one step may be in_progress, and this would make {} steps in progress \
                 (ids {}); mark the finished one completed (or pending/blocked) in the same \
                 call, then start the next",
                busy.len(),
                busy.join(", ")
            );
        }
        Ok(())
    }

    /// The goal as a person reads it.
    pub fn render_goal(&self) -> String {
        format!(
            "Goal ({}): {}",
            self.goal_review.describe(Part::Goal, self.said_in),
            self.goal.as_deref().unwrap_or("(none set)")
        )
    }

    /// The steps as a checklist.
    pub fn render_steps(&self) -> String {
        let mut out = format!(
            "Plan ({}):",
            self.plan_review.describe(Part::Plan, self.said_in)
        );
        if self.steps.is_empty() {
            out.push_str("\n  (no steps)");
        }
        for step in &self.steps {
            out.push_str(&format!(
                "\n  {} {}. {}",
                step.status.mark(),
                step.id,
                step.title
            ));
            if step.status != Status::Pending && step.status != Status::Completed {
                out.push_str(&format!(" ({})", step.status.as_str()));
            }
            if let Some(note) = &step.note {
                out.push_str(&format!(" — {note}"));
            }
        }
        out
    }

    /// The whole plan: the goal, the checklist, each with its review state.
    pub fn render(&self) -> String {
        if self.is_empty() {
            return format!(
                "No plan yet: set one with {} (a goal and/or steps).",
                set_call(self.said_in, None)
            );
        }
        format!("{}\n{}", self.render_goal(), self.render_steps())
    }
}

/// Reads the session's plan; a missing file (or session folder) is the empty plan. Never
/// follows a link: a link planted in its place is an error.
pub fn load(workspace: &Workspace) -> Result<Plan> {
    let sid = workspace
        .session()
        .ok_or_else(|| anyhow!("a plan belongs to a session, and this call has none"))?;
    let dir = match workspace
        .existing_toolbox_subdir(&[OsStr::new("sessions"), OsStr::new(sid.as_str())])
    {
        Ok(dir) => dir,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Plan::default()),
        Err(e) => return Err(e).context(shown(sid.as_str())),
    };
    let file = match dir.open_file(OsStr::new(FILE)) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Plan::default()),
        Err(e) => return Err(e).context(shown(sid.as_str())),
    };
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(|| shown(sid.as_str()))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        bail!(
            "{} is larger than {MAX_FILE_BYTES} bytes, so it was not read",
            shown(sid.as_str())
        );
    }
    let mut plan: Plan = serde_json::from_slice(&bytes).with_context(|| {
        format!(
            "{} is not a plan toolbox wrote (delete it to start over)",
            shown(sid.as_str())
        )
    })?;
    plan.check_seals(
        sid.as_str(),
        toolbox_host::seal::for_workspace(workspace.root()),
    );
    Ok(plan)
}

/// Replaces the session's plan file atomically (never through a link).
pub fn save(workspace: &Workspace, plan: &Plan) -> Result<()> {
    let sid = workspace
        .session()
        .ok_or_else(|| anyhow!("a plan belongs to a session, and this call has none"))?;
    let dir = workspace
        .toolbox_subdir(&[OsStr::new("sessions"), OsStr::new(sid.as_str())])
        .with_context(|| shown(sid.as_str()))?;
    let mut plan = plan.clone();
    plan.seal_reviews(
        sid.as_str(),
        toolbox_host::seal::for_workspace(workspace.root()),
    );
    let bytes = serde_json::to_vec_pretty(&plan)?;
    dir.write_atomic(OsStr::new(FILE), &bytes)
        .with_context(|| format!("could not write {}", shown(sid.as_str())))
}

fn shown(sid: &str) -> String {
    format!(".toolbox/sessions/{sid}/{FILE}")
}

/// Now, RFC 3339 UTC to the second.
pub fn now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

//! Approvals over MCP. In permission mode `auto` a risky call waits for an answer; the
//! executor emits an [`ApprovalRequest`] and both transports settle it the same way:
//!
//! - a client that declared form elicitation at `initialize` is asked with an
//!   `elicitation/create` request carrying [`approval_form`]: the call's preview as plain
//!   text and one required field, `decision`, `approve` or `deny`. Only `accept` with
//!   `approve` runs the call ([`approval_decision`]); any other answer refuses it with
//!   [`denied_by_user`], a request that failed with [`asking_failed`];
//! - a client that cannot be asked gets the server's [`Fallback`] (`--approve yes|no`):
//!   the call runs, or is refused with [`cannot_ask`], which says how to allow it.
//!
//! The stdio server writes the form as JSON ([`approval_form_json`]) and reads the answer
//! from JSON ([`approval_decision_json`]); the HTTP one hands rmcp's types to rmcp.

use rmcp::model::{
    ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema, EnumSchema,
    PrimitiveSchemaDefinition, StringSchema,
};
use serde_json::Value;
use toolbox_executor::{ApprovalDecision, ToolExecutor};
use toolbox_host::{ApprovalRequest, QuestionKind};

/// What a risky call gets in permission mode `auto` when the MCP client cannot be asked
/// (it did not declare the `elicitation` capability at `initialize`): `--approve yes|no` of
/// `toolbox mcp` and `toolbox serve`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// Run it (`--approve yes`): the client confirms tool calls with its user itself, as
    /// most MCP clients do.
    Approve,
    /// Refuse it (`--approve no`, the default), with a result saying that the client cannot
    /// be asked and how to allow such calls.
    Deny,
}

/// The most preview text an approval form shows; a longer preview is cut (the message says
/// so).
const MAX_FORM_PREVIEW_CHARS: usize = 8000;

/// The form field the client's user answers in.
const DECISION_FIELD: &str = "decision";

/// The `elicitation/create` request for one approval: a message saying what the call will
/// do (its [`Preview`](toolbox_core::Preview) as plain text, never its arguments as JSON),
/// and a form with one required field, `decision`, either `approve` or `deny`. Both MCP
/// transports send this same form.
pub fn approval_form(request: &ApprovalRequest) -> ElicitRequestParams {
    let preview = request.preview.to_text(false);
    let preview = match preview.char_indices().nth(MAX_FORM_PREVIEW_CHARS) {
        Some((cut, _)) => format!("{}\n… (the rest is cut here)", &preview[..cut]),
        None => preview,
    };
    if request.kind == QuestionKind::Review {
        return review_form(request, &preview);
    }
    let message = format!(
        "toolbox asks: allow {} (risk {})?\n\n{preview}\n\nApprove this call?",
        request.shown_tool(),
        request.risk
    );
    let decision = EnumSchema::builder(vec!["approve".into(), "deny".into()])
        .enum_titles(vec!["Approve: run it".into(), "Deny: do not run it".into()])
        .map(|schema| schema.title("Decision").build())
        .unwrap_or_else(|_| EnumSchema::builder(vec!["approve".into(), "deny".into()]).build());
    let requested_schema = ElicitationSchema::builder()
        .required_property(DECISION_FIELD, PrimitiveSchemaDefinition::Enum(decision))
        .description(format!(
            "Approve or deny the call of {}",
            request.shown_tool()
        ))
        .build()
        .unwrap_or_else(|_| ElicitationSchema::new(Default::default()));
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema,
    }
}

/// The form of a review question: the goal or checklist, a required `decision` (`approve`
/// or `reject`) and an optional `feedback` text the model gets word for word.
fn review_form(request: &ApprovalRequest, preview: &str) -> ElicitRequestParams {
    let message = format!(
        "toolbox asks you to review (for {}):\n\n{preview}\n\nApprove it, or reject it with \
         feedback for the model?",
        request.shown_tool()
    );
    let choices = || vec!["approve".to_string(), "reject".to_string()];
    let decision = EnumSchema::builder(choices())
        .enum_titles(vec![
            "Approve: confirm it".into(),
            "Reject: send it back with feedback".into(),
        ])
        .map(|schema| schema.title("Decision").build())
        .unwrap_or_else(|_| EnumSchema::builder(choices()).build());
    let feedback = StringSchema::new()
        .title("Feedback")
        .description("What to change or keep in mind (optional); the model reads it as written");
    let requested_schema = ElicitationSchema::builder()
        .required_property(DECISION_FIELD, PrimitiveSchemaDefinition::Enum(decision))
        .property(FEEDBACK_FIELD, PrimitiveSchemaDefinition::String(feedback))
        .description("Approve or reject, with optional feedback")
        .build()
        .unwrap_or_else(|_| ElicitationSchema::new(Default::default()));
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema,
    }
}

/// The form field a review's feedback is written in.
const FEEDBACK_FIELD: &str = "feedback";

/// What the client's answer says: approved or not, and the feedback text, if any.
pub fn answer_of(result: &ElicitResult) -> Answer<'static> {
    let feedback = result
        .content
        .as_ref()
        .and_then(|c| c.get(FEEDBACK_FIELD))
        .and_then(Value::as_str)
        .map(|f| f.chars().take(16_000).collect::<String>())
        .filter(|f| !f.trim().is_empty());
    if approval_decision(result) {
        Answer::Approved(feedback)
    } else {
        Answer::Denied(feedback)
    }
}

/// [`answer_of`] an `elicitation/create` result as JSON; a result that is no elicitation
/// result denies.
pub fn answer_of_json(result: &Value) -> Answer<'static> {
    match serde_json::from_value::<ElicitResult>(result.clone()) {
        Ok(r) => answer_of(&r),
        Err(_) => Answer::Denied(None),
    }
}

/// Whether the client's answer approves: `accept` with `decision` `approve` (or `true`).
/// Anything else, `decline` and `cancel` included, denies.
pub fn approval_decision(result: &ElicitResult) -> bool {
    if result.action != ElicitationAction::Accept {
        return false;
    }
    match result.content.as_ref().and_then(|c| c.get(DECISION_FIELD)) {
        Some(Value::String(s)) => s == "approve",
        Some(Value::Bool(b)) => *b,
        _ => false,
    }
}

/// [`approval_form`] as the JSON `params` of an `elicitation/create` request, for a
/// transport that writes its own JSON-RPC (`toolbox mcp` on stdio).
pub fn approval_form_json(request: &ApprovalRequest) -> Value {
    serde_json::to_value(approval_form(request)).unwrap_or(Value::Null)
}

/// [`approval_decision`] of an `elicitation/create` result as JSON; a result that is no
/// elicitation result denies.
pub fn approval_decision_json(result: &Value) -> bool {
    serde_json::from_value::<ElicitResult>(result.clone()).is_ok_and(|r| approval_decision(&r))
}

/// Whether an `initialize` request's client capabilities let the server ask by a form
/// (`elicitation: {}` in 2025-06-18, or with `form` in later revisions).
pub fn can_elicit_form(capabilities: &Value) -> bool {
    match capabilities.get("elicitation") {
        Some(Value::Object(modes)) => modes.is_empty() || modes.contains_key("form"),
        _ => false,
    }
}

/// The result of a call refused because the client cannot be asked and the server was
/// started with `--approve no` (the default), on either MCP transport.
pub fn cannot_ask(request: &ApprovalRequest) -> String {
    format!(
        "tool {} needs approval (permission mode auto, risk {}) but this MCP client cannot be \
         asked: it did not declare the elicitation capability at initialize, and the server \
         was started with --approve no (the default), so the call was refused without asking. \
         To allow such calls, use a client that supports elicitation, restart the server with \
         --approve yes (risky calls then run without asking; the client should confirm them \
         with its user) or --mode full; to stop offering them, use --mode read_only.",
        request.shown_tool(),
        request.risk
    )
}

/// The result of a call the client's user denied.
pub fn denied_by_user(request: &ApprovalRequest) -> String {
    format!("the MCP client's user denied tool {}", request.shown_tool())
}

/// The result of a call whose approval could not be asked for.
pub fn asking_failed(request: &ApprovalRequest, why: &str) -> String {
    format!(
        "tool {} needs approval (permission mode auto, risk {}) and asking the MCP client \
         failed ({why}), so the call was denied; to run such calls without asking, restart \
         the server with --mode full",
        request.shown_tool(),
        request.risk
    )
}

/// What came of asking the client.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer<'a> {
    /// [`approval_decision`] said yes; the feedback written, if any.
    Approved(Option<String>),
    /// Any other answer of the client; the feedback written, if any.
    Denied(Option<String>),
    /// The request failed, for this reason.
    Failed(&'a str),
}

/// Settles `request` with the client's answer: the call runs, or is refused in the words
/// for that answer. A review is answered as the client's user's (`by` `mcp`), with their
/// feedback.
pub(crate) fn settle(executor: &ToolExecutor, request: &ApprovalRequest, answer: Answer<'_>) {
    let (session, call) = (request.session_id.as_str(), request.call_id.as_str());
    if request.kind == QuestionKind::Review {
        match answer {
            Answer::Approved(feedback) => {
                executor.respond_as_person(
                    session,
                    call,
                    ApprovalDecision::Approve,
                    feedback,
                    "mcp",
                );
            }
            Answer::Denied(feedback) => {
                executor.respond_as_person(session, call, ApprovalDecision::Deny, feedback, "mcp");
            }
            Answer::Failed(why) => {
                executor.deny_approval(
                    session,
                    call,
                    format!("asking the MCP client failed ({why})"),
                );
            }
        }
        return;
    }
    match answer {
        // The client's user accepted: recorded as theirs (`approved_by` `mcp`).
        Answer::Approved(_) => {
            executor.respond_as_person(session, call, ApprovalDecision::Approve, None, "mcp");
        }
        Answer::Denied(_) => {
            executor.deny_approval(session, call, denied_by_user(request));
        }
        Answer::Failed(why) => {
            executor.deny_approval(session, call, asking_failed(request, why));
        }
    }
}

/// Settles `request`, whose client cannot be asked, per `fallback`.
pub(crate) fn settle_unasked(
    executor: &ToolExecutor,
    request: &ApprovalRequest,
    fallback: Fallback,
) {
    let (session, call) = (request.session_id.as_str(), request.call_id.as_str());
    if request.kind == QuestionKind::Review {
        // --approve answers tool approvals; a review is a person's answer or none.
        executor.deny_approval(
            session,
            call,
            "this MCP client cannot be asked: it did not declare the elicitation capability \
             at initialize, and a review needs a person's answer (--approve yes does not give \
             one); answer it from a client that supports elicitation, or over HTTP with \
             toolbox serve",
        );
        return;
    }
    match fallback {
        Fallback::Approve => {
            executor.respond_approval(session, call, ApprovalDecision::Approve);
        }
        Fallback::Deny => {
            executor.deny_approval(session, call, cannot_ask(request));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use toolbox_core::{SessionId, ToolRisk};

    fn request(arguments: Value) -> ApprovalRequest {
        ApprovalRequest {
            session_id: SessionId::parse("mcp").unwrap(),
            call_id: "c1".into(),
            tool: "file_manager__write".into(),
            called_as: None,
            preview: toolbox_core::Preview::arguments("file_manager__write", &arguments),
            arguments,
            risk: ToolRisk::FileWrite,
            kind: Default::default(),
        }
    }

    #[test]
    fn the_form_names_tool_risk_and_arguments_and_asks_one_choice() {
        let form = serde_json::to_value(approval_form(&request(json!({"path": "a.txt"})))).unwrap();
        assert_eq!(form["mode"], "form");
        let message = form["message"].as_str().unwrap();
        assert!(message.contains("file_manager__write"), "{message}");
        assert!(message.contains("a.txt"), "{message}");
        assert!(
            message.contains(&ToolRisk::FileWrite.to_string()),
            "{message}"
        );
        let schema = &form["requestedSchema"];
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["required"], json!([DECISION_FIELD]));
        let values: Vec<Value> = schema["properties"][DECISION_FIELD]["oneOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["const"].clone())
            .collect();
        assert_eq!(values, vec![json!("approve"), json!("deny")]);
    }

    #[test]
    fn long_previews_are_cut_on_a_character_boundary() {
        let long = "é\n".repeat(20_000);
        let mut asked = request(json!({}));
        asked.preview = toolbox_core::Preview::new("Write")
            .text(&long)
            .text(&long)
            .text(&long);
        let mut huge = String::new();
        for _ in 0..50 {
            huge.push_str(&"é".repeat(300));
            huge.push('\n');
        }
        for _ in 0..20 {
            asked.preview = asked.preview.clone().text(&huge);
        }
        let form = approval_form(&asked);
        let ElicitRequestParams::FormElicitationParams { message, .. } = form else {
            panic!("not a form");
        };
        assert!(message.contains("the rest is cut here"), "{message}");
        assert!(message.chars().count() < MAX_FORM_PREVIEW_CHARS + 500);
        // The arguments are never shown as JSON.
        let plain = approval_form(&request(json!({"path": "a.txt", "content": "x\ny"})));
        let ElicitRequestParams::FormElicitationParams { message, .. } = plain else {
            panic!("not a form");
        };
        assert!(message.contains("path: a.txt"), "{message}");
        assert!(
            !message.contains("\\n") && !message.contains('{'),
            "{message}"
        );
    }

    #[test]
    fn a_review_form_asks_approve_or_reject_with_feedback() {
        let mut asked = request(json!({}));
        asked.kind = QuestionKind::Review;
        asked.preview = toolbox_core::Preview::new("Review the plan").text("[ ] 1. Read the data");
        let form = serde_json::to_value(approval_form(&asked)).unwrap();
        let message = form["message"].as_str().unwrap();
        assert!(message.contains("[ ] 1. Read the data"), "{message}");
        let schema = &form["requestedSchema"];
        assert_eq!(schema["required"], json!([DECISION_FIELD]));
        assert_eq!(schema["properties"][FEEDBACK_FIELD]["type"], "string");
        let values: Vec<Value> = schema["properties"][DECISION_FIELD]["oneOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["const"].clone())
            .collect();
        assert_eq!(values, vec![json!("approve"), json!("reject")]);
        assert_eq!(
            answer_of_json(
                &json!({"action": "accept", "content": {"decision": "reject", "feedback": "more tests"}})
            ),
            Answer::Denied(Some("more tests".into()))
        );
        assert_eq!(
            answer_of_json(&json!({"action": "accept", "content": {"decision": "approve"}})),
            Answer::Approved(None)
        );
    }

    #[test]
    fn form_elicitation_is_read_from_the_capabilities() {
        assert!(can_elicit_form(&json!({"elicitation": {}})));
        assert!(can_elicit_form(
            &json!({"elicitation": {"form": {}, "url": {}}})
        ));
        assert!(!can_elicit_form(&json!({"elicitation": {"url": {}}})));
        assert!(!can_elicit_form(&json!({"sampling": {}})));
        assert!(!can_elicit_form(&Value::Null));
    }

    #[test]
    fn only_an_accepted_approve_approves() {
        let answer = |action, content: Option<Value>| {
            let mut result = ElicitResult::new(action);
            result.content = content;
            approval_decision(&result)
        };
        assert!(answer(
            ElicitationAction::Accept,
            Some(json!({"decision": "approve"}))
        ));
        assert!(answer(
            ElicitationAction::Accept,
            Some(json!({"decision": true}))
        ));
        assert!(!answer(
            ElicitationAction::Accept,
            Some(json!({"decision": "deny"}))
        ));
        assert!(!answer(
            ElicitationAction::Accept,
            Some(json!({"decision": "APPROVE"}))
        ));
        assert!(!answer(ElicitationAction::Accept, None));
        assert!(!answer(
            ElicitationAction::Decline,
            Some(json!({"decision": "approve"}))
        ));
        assert!(!answer(ElicitationAction::Cancel, None));
        // The JSON form the stdio server reads gives the same answers.
        assert!(approval_decision_json(
            &json!({"action": "accept", "content": {"decision": "approve"}})
        ));
        assert!(!approval_decision_json(&json!({"action": "decline"})));
        assert!(!approval_decision_json(&json!({"decision": "approve"})));
    }
}

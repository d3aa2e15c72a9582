//! The approvals the proxy told a client to wait for, remembered by client
//! and by exactly what was asked, so that the same request sent again
//! awaits the same approval instead of asking a person afresh. Pure: the
//! clock is passed in; bounded per client, expired entries dropped.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use warden_sdk::proto as pb;
use warden_sdk::{ActionRequest, Actor};

/// Approvals remembered per client (per actor) by default; past it the
/// oldest is dropped (its request, sent again, asks afresh).
pub const PER_CLIENT: usize = 1024;

/// Exactly what the proxy asked `Authorize`: the action, the resource, the
/// context and the justification, less the idempotency key (fresh for each
/// call). The actor is the key of the map it is kept in.
#[derive(Debug, Clone, PartialEq)]
pub struct Asked(pb::AuthorizeRequest);

impl Asked {
    /// What `request` asks.
    pub fn of(request: &ActionRequest) -> Self {
        let mut message = request.clone().into_proto_request();
        message.request_id.clear();
        message.actor = None;
        Self(message)
    }
}

/// An approval a client was told to wait for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Awaited {
    /// The monitor's approval id.
    pub approval_id: String,
    /// The approval's deadline: from then on the request is asked afresh.
    pub expires_at: SystemTime,
    /// The monitor gave this proxy the approval's ALLOW (which it gives
    /// once), and the request that took it was not sent: the next one sent
    /// uses it without asking again.
    pub held: bool,
}

/// The user, agent and session of a client.
type ActorKey = (String, String, String);

fn key(actor: &Actor) -> ActorKey {
    (actor.user.clone(), actor.agent.clone(), actor.session.clone())
}

/// The remembered approvals of every client, oldest first per client.
#[derive(Debug)]
pub struct Pending {
    per_client: usize,
    by_actor: Mutex<HashMap<ActorKey, VecDeque<(Asked, Awaited)>>>,
}

impl Pending {
    /// At most `per_client` approvals per actor (at least one). The actors
    /// are the proxy's clients, a fixed list: memory is bounded by
    /// clients × `per_client`.
    pub fn new(per_client: usize) -> Self {
        Self { per_client: per_client.max(1), by_actor: Mutex::new(HashMap::new()) }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<ActorKey, VecDeque<(Asked, Awaited)>>> {
        // Nothing in here can be left half done: a poisoned lock is as good.
        self.by_actor.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `change` on `actor`'s entries once the expired ones are gone,
    /// and drops the actor when none are left.
    fn with<T>(&self, actor: &Actor, now: SystemTime, change: impl FnOnce(&mut VecDeque<(Asked, Awaited)>) -> T) -> T {
        let mut all = self.lock();
        let key = key(actor);
        let entries = all.entry(key.clone()).or_default();
        entries.retain(|(_, awaited)| awaited.expires_at > now);
        let out = change(entries);
        if entries.is_empty() {
            all.remove(&key);
        }
        out
    }

    /// The approval `actor` was told to wait for `asked`, unless it has
    /// expired.
    pub fn find(&self, actor: &Actor, asked: &Asked, now: SystemTime) -> Option<Awaited> {
        self.with(actor, now, |entries| entries.iter().find(|(a, _)| a == asked).map(|(_, awaited)| awaited.clone()))
    }

    /// Remembers that `actor` waits for `awaited` on `asked`, in place of
    /// any earlier approval for the same request; the oldest goes when the
    /// client has its fill.
    pub fn remember(&self, actor: &Actor, asked: Asked, awaited: Awaited, now: SystemTime) {
        let per_client = self.per_client;
        self.with(actor, now, |entries| {
            entries.retain(|(a, _)| *a != asked);
            while entries.len() >= per_client {
                entries.pop_front();
            }
            entries.push_back((asked, awaited));
        });
    }

    /// Takes the entry for `asked` if it is still approval `approval_id`
    /// (an approval lets one request through: whoever takes it uses it).
    pub fn take(&self, actor: &Actor, asked: &Asked, approval_id: &str, now: SystemTime) -> Option<Awaited> {
        self.with(actor, now, |entries| {
            let at = entries.iter().position(|(a, awaited)| a == asked && awaited.approval_id == approval_id)?;
            entries.remove(at).map(|(_, awaited)| awaited)
        })
    }

    /// Puts back an entry taken, with its ALLOW, for a request that was not
    /// sent after all, unless the request has another approval by now.
    pub fn restore(&self, actor: &Actor, asked: Asked, awaited: Awaited, now: SystemTime) {
        if awaited.expires_at <= now || self.find(actor, &asked, now).is_some() {
            return;
        }
        self.remember(actor, asked, Awaited { held: true, ..awaited }, now);
    }

    /// How many approvals `actor` has remembered now.
    pub fn len(&self, actor: &Actor, now: SystemTime) -> usize {
        self.with(actor, now, |entries| entries.len())
    }

    /// How many clients have approvals remembered (expired ones included
    /// until the client is next seen).
    pub fn clients(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + seconds)
    }

    fn awaited(id: &str, until: u64) -> Awaited {
        Awaited { approval_id: id.into(), expires_at: at(until), held: false }
    }

    fn post(url: &str) -> Asked {
        Asked::of(&ActionRequest::http("POST", url))
    }

    #[test]
    fn the_same_request_of_the_same_client_finds_its_approval() {
        let pending = Pending::new(PER_CLIENT);
        let alice = Actor::new("alice", "sandbox", "s1");
        pending.remember(&alice, post("https://x/deploy"), awaited("a1", 100), at(0));
        // A fresh request id is still the same request.
        assert_eq!(pending.find(&alice, &post("https://x/deploy"), at(1)), Some(awaited("a1", 100)));
        // Another method, URL, session, agent or user is another request.
        assert_eq!(pending.find(&alice, &Asked::of(&ActionRequest::http("PUT", "https://x/deploy")), at(1)), None);
        assert_eq!(pending.find(&alice, &post("https://x/deploy?x"), at(1)), None);
        for other in
            [Actor::new("alice", "sandbox", "s2"), Actor::new("alice", "ci", "s1"), Actor::new("bob", "sandbox", "s1")]
        {
            assert_eq!(pending.find(&other, &post("https://x/deploy"), at(1)), None, "{other:?}");
        }
        // A secret's context (destination, header) is part of what was asked.
        let secret = |to: &str| {
            Asked::of(&ActionRequest::use_secret("api-key").context_json(format!(r#"{{"destination":"{to}"}}"#)))
        };
        pending.remember(&alice, secret("a.example"), awaited("s1", 100), at(0));
        assert_eq!(pending.find(&alice, &secret("a.example"), at(1)).map(|a| a.approval_id), Some("s1".into()));
        assert_eq!(pending.find(&alice, &secret("b.example"), at(1)), None);
    }

    #[test]
    fn an_approval_is_taken_once_and_expires_at_its_deadline() {
        let pending = Pending::new(PER_CLIENT);
        let alice = Actor::new("alice", "sandbox", "s1");
        let asked = post("https://x/deploy");
        pending.remember(&alice, asked.clone(), awaited("a1", 100), at(0));
        assert_eq!(pending.take(&alice, &asked, "other", at(1)), None, "another approval's id takes nothing");
        assert_eq!(pending.take(&alice, &asked, "a1", at(1)), Some(awaited("a1", 100)));
        assert_eq!(pending.take(&alice, &asked, "a1", at(1)), None, "taken twice");
        assert_eq!(pending.find(&alice, &asked, at(1)), None);
        // Put back, held (its ALLOW was given), when the request was not
        // sent after all; not over a newer approval of the same request.
        pending.restore(&alice, asked.clone(), awaited("a1", 100), at(2));
        assert_eq!(pending.find(&alice, &asked, at(2)), Some(Awaited { held: true, ..awaited("a1", 100) }));
        pending.remember(&alice, asked.clone(), awaited("a2", 200), at(3));
        pending.restore(&alice, asked.clone(), awaited("a1", 100), at(3));
        assert_eq!(pending.find(&alice, &asked, at(3)), Some(awaited("a2", 200)));
        assert_eq!(pending.len(&alice, at(3)), 1, "one entry per request");
        // At the deadline it is gone, and so is the client.
        assert_eq!(pending.find(&alice, &asked, at(200)), None);
        assert_eq!(pending.clients(), 0);
        pending.restore(&alice, asked.clone(), awaited("a2", 200), at(200));
        assert_eq!(pending.clients(), 0, "an expired approval is not put back");
    }

    #[test]
    fn a_client_keeps_a_bounded_number_the_oldest_dropped() {
        let pending = Pending::new(3);
        let alice = Actor::new("alice", "sandbox", "s1");
        let bob = Actor::new("bob", "sandbox", "s1");
        for n in 0..5 {
            pending.remember(&alice, post(&format!("https://x/{n}")), awaited(&format!("a{n}"), 100), at(0));
        }
        pending.remember(&bob, post("https://x/0"), awaited("b0", 100), at(0));
        assert_eq!(pending.len(&alice, at(1)), 3);
        assert_eq!(pending.find(&alice, &post("https://x/1"), at(1)), None, "the oldest went first");
        assert_eq!(pending.find(&alice, &post("https://x/4"), at(1)).map(|a| a.approval_id), Some("a4".into()));
        // One client's fill does not push out another's.
        assert_eq!(pending.find(&bob, &post("https://x/0"), at(1)).map(|a| a.approval_id), Some("b0".into()));
        assert_eq!(pending.clients(), 2);
    }
}

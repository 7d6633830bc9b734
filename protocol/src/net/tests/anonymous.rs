//! Anonymous gossip: what goes on the wire, who is still heard, and what still refuses a forgery.

use super::*;

/// What a bare peer is told to do.
enum BareCommand {
    Dial(Multiaddr),
    Publish(Vec<u8>, oneshot::Sender<Result<MessageId, PublishError>>),
    Score(PeerId, oneshot::Sender<Option<f64>>),
}

/// A bare gossipsub peer on the reports topic, not a druse node: another implementation, or a
/// druse node of an earlier release (`Signed` with `ValidationMode::Strict`). It has no
/// validator, so it forwards whatever its gossipsub takes, and it hands on every message its
/// gossipsub delivers. It scores peers with druse's parameters.
struct Bare {
    key: Keypair,
    commands: mpsc::Sender<BareCommand>,
    messages: mpsc::Receiver<gossipsub::Message>,
    _task: TaskGuard,
}

impl Bare {
    fn start(seed: u8, authenticity: fn(&Keypair) -> MessageAuthenticity, mode: ValidationMode) -> Self {
        let key = Keypair::from_seed([seed; 32]);
        let config = gossipsub::ConfigBuilder::default()
            .validation_mode(mode)
            .message_id_fn(behaviour::message_id)
            .heartbeat_interval(HEARTBEAT)
            .heartbeat_initial_delay(HEARTBEAT)
            .build()
            .unwrap();
        let mut gossipsub: gossipsub::Behaviour = gossipsub::Behaviour::new(authenticity(&key), config).unwrap();
        gossipsub.with_peer_score(behaviour::score_params(false), behaviour::score_thresholds()).unwrap();
        gossipsub.subscribe(&IdentTopic::new(crate::topic::REPORTS)).unwrap();
        let mut swarm = libp2p::SwarmBuilder::with_existing_identity(key.to_libp2p())
            .with_tokio()
            .with_tcp(libp2p::tcp::Config::default(), libp2p::noise::Config::new, libp2p::yamux::Config::default)
            .unwrap()
            .with_behaviour(|_| gossipsub)
            .unwrap()
            .with_swarm_config(|c| c.with_idle_connection_timeout(Duration::from_secs(60)))
            .build();
        let (command_tx, mut commands) = mpsc::channel(16);
        let (message_tx, messages) = mpsc::channel(64);
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    command = commands.recv() => match command {
                        Some(BareCommand::Dial(addr)) => swarm.dial(addr).unwrap(),
                        Some(BareCommand::Publish(data, reply)) => {
                            let topic = IdentTopic::new(crate::topic::REPORTS);
                            let _ = reply.send(swarm.behaviour_mut().publish(topic, data));
                        }
                        Some(BareCommand::Score(peer, reply)) => {
                            let _ = reply.send(swarm.behaviour().peer_score(&peer));
                        }
                        None => break,
                    },
                    event = swarm.select_next_some() => {
                        if let SwarmEvent::Behaviour(gossipsub::Event::Message { message, .. }) = event {
                            let _ = message_tx.try_send(message);
                        }
                    }
                }
            }
        });
        Self { key, commands: command_tx, messages, _task: TaskGuard(task) }
    }

    /// A druse node of an earlier release: it signs what it publishes and requires signatures.
    fn older_druse(seed: u8) -> Self {
        Self::start(seed, |key| MessageAuthenticity::Signed(key.to_libp2p()), ValidationMode::Strict)
    }

    fn peer_id(&self) -> PeerId {
        self.key.peer_id()
    }

    async fn dial(&self, node: &Node) {
        self.commands.send(BareCommand::Dial(node.addr.clone())).await.unwrap();
    }

    async fn publish_when_subscribed(&self, data: Vec<u8>) -> MessageId {
        timeout(WAIT, async {
            loop {
                let (reply, answer) = oneshot::channel();
                self.commands.send(BareCommand::Publish(data.clone(), reply)).await.unwrap();
                match answer.await.unwrap() {
                    Ok(id) => break id,
                    Err(PublishError::NoPeersSubscribedToTopic) => sleep(Duration::from_millis(20)).await,
                    Err(e) => panic!("bare publish failed: {e}"),
                }
            }
        })
        .await
        .expect("no peer ever subscribed")
    }

    async fn score(&self, peer: PeerId) -> f64 {
        let (reply, answer) = oneshot::channel();
        self.commands.send(BareCommand::Score(peer, reply)).await.unwrap();
        answer.await.unwrap().expect("scoring is on")
    }

    async fn receive(&mut self) -> gossipsub::Message {
        timeout(WAIT, self.messages.recv()).await.expect("no message arrived").expect("bare peer stopped")
    }
}

/// Waits until `peer` is in `node`'s mesh for the reports topic (forwarding uses the mesh).
async fn wait_for_mesh(node: &Node, peer: PeerId) {
    timeout(WAIT, async {
        while !node.handle.mesh_peers(crate::topic::REPORTS).await.unwrap().contains(&peer) {
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the peer never joined the mesh");
}

/// The application validator, as a node runs it on a gossiped message.
fn judge(data: &[u8], source: Option<PeerId>) -> Verdict {
    let source = source.expect("the event names no author");
    let mut view = TrustView::new(validate::Config::default(), TrustList::default());
    validate::validate(data, &source, crate::topic::REPORTS, NOW, &mut view)
}

#[tokio::test(flavor = "multi_thread")]
async fn our_messages_carry_no_author_seqno_or_signature() {
    let a = start(131, config(TCP)).await;
    // Gossipsub's Anonymous validation refuses any message that carries an author, a sequence
    // number or a signature: that it delivers ours proves they carry none.
    let mut bare = Bare::start(132, |_| MessageAuthenticity::Anonymous, ValidationMode::Anonymous);
    bare.dial(&a).await;
    let data = envelope(&a.key, 1);
    let id = publish_when_subscribed(&a, data.clone()).await;

    let message = bare.receive().await;
    assert_eq!(message.source, None, "our message names a gossipsub author");
    assert_eq!(message.sequence_number, None, "our message carries a sequence number");
    assert_eq!(message.data, data);
    assert_eq!(behaviour::message_id(&message), id);
    assert!(bare.score(a.key.peer_id()).await >= 0.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_signing_peer_is_heard_and_its_envelope_validated() {
    let mut b = start(141, config(TCP)).await;
    let signer = Bare::older_druse(142);
    signer.dial(&b).await;
    let data = envelope(&signer.key, 1);
    let id = signer.publish_when_subscribed(data.clone()).await;

    let (got, from, source, received) = receive(&mut b).await;
    assert_eq!((&got, from, &received), (&id, signer.peer_id(), &data));
    assert_eq!(source, Some(signer.peer_id()), "the author is the envelope's signer");
    let verdict = judge(&received, source);
    assert!(verdict.is_accept(), "{verdict:?}");
    b.handle.report(got, from, Acceptance::Accept).await.unwrap();
    let score = b.handle.peer_score(signer.peer_id()).await.unwrap().unwrap();
    assert!(score >= 0.0, "a signing peer was penalised: {score}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_signed_message_is_forwarded_intact_to_a_peer_that_requires_signatures() {
    // S (signs) - B (this release) - C (an older release: requires and verifies signatures).
    let mut b = start(151, config(TCP)).await;
    let signer = Bare::older_druse(152);
    let mut strict = Bare::older_druse(153);
    signer.dial(&b).await;
    strict.dial(&b).await;
    wait_for_mesh(&b, strict.peer_id()).await;

    let data = envelope(&signer.key, 1);
    let id = signer.publish_when_subscribed(data.clone()).await;
    let (got, from, _, _) = receive(&mut b).await;
    assert_eq!(got, id);
    b.handle.report(got, from, Acceptance::Accept).await.unwrap();

    // C's Strict mode verified the signature S made: B kept author, seqno and signature.
    let message = strict.receive().await;
    assert_eq!((message.source, message.data), (Some(signer.peer_id()), data));
    assert!(message.sequence_number.is_some());
    assert!(strict.score(b.key.peer_id()).await >= 0.0, "C penalised B for forwarding");
}

/// The mixed-version swarm, stated as a test: a node of an earlier release (`Strict`) refuses
/// what this release publishes, unsigned, and penalises the peer that sent it.
#[tokio::test(flavor = "multi_thread")]
async fn an_older_strict_node_refuses_our_messages_and_penalises_us() {
    let a = start(161, config(TCP)).await;
    let mut older = Bare::older_druse(162);
    older.dial(&a).await;
    publish_when_subscribed(&a, envelope(&a.key, 1)).await;

    let arrived = timeout(SILENCE, older.messages.recv()).await;
    assert!(arrived.is_err(), "a Strict node took an unsigned message: {arrived:?}");
    let score = older.score(a.key.peer_id()).await;
    assert!(score < 0.0, "the Strict node did not penalise us: {score}");
}

#[tokio::test(flavor = "multi_thread")]
async fn two_copies_of_one_envelope_are_one_message() {
    let a = start(171, config(TCP)).await;
    let mut b = start(172, config(TCP)).await;
    let signer = Bare::older_druse(173);
    connect(&a, &b).await;
    signer.dial(&b).await;

    // A publishes an envelope unsigned; S publishes the same envelope again, signed, with its
    // own author and seqno. B holds the first until its verdict, and drops the second as a
    // duplicate: the id is the topic and the envelope, nothing else.
    let data = envelope(&a.key, 1);
    let id = publish_when_subscribed(&a, data.clone()).await;
    let (got, from, _, _) = receive(&mut b).await;
    assert_eq!(got, id);
    assert_eq!(signer.publish_when_subscribed(data.clone()).await, id, "the signed copy has another id");
    let again = timeout(SILENCE, next_message(&mut b.events)).await;
    assert!(again.is_err(), "B was handed the second copy: {again:?}");
    let result = a.handle.publish(crate::topic::REPORTS, data).await;
    assert!(matches!(result, Err(Error::Duplicate)), "{result:?}");

    b.handle.report(got, from, Acceptance::Accept).await.unwrap();
    let score = b.handle.peer_score(signer.peer_id()).await.unwrap().unwrap();
    assert!(score >= 0.0, "the second copy cost S: {score}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forged_envelope_is_refused_by_the_validator_and_its_sender_penalised() {
    let a = start(181, config(TCP)).await;
    let mut b = start(182, config(TCP)).await;
    connect(&a, &b).await;
    // A signs a report, then names another key (the victim's) as signer and reporter: the
    // signature no longer verifies for the signer the envelope names.
    let victim = Keypair::from_seed([183; 32]);
    let genuine = envelope(&a.key, 1);
    let (from_key, to_key) = (a.key.public().to_bytes(), victim.public().to_bytes());
    let mut forged = genuine.clone();
    for at in 0..=forged.len() - from_key.len() {
        if forged[at..at + from_key.len()] == from_key {
            forged[at..at + to_key.len()].copy_from_slice(&to_key);
        }
    }
    assert!(forged != genuine && Envelope::open(&forged).is_err());

    let id = publish_when_subscribed(&a, forged.clone()).await;
    let (got, from, source, data) = receive(&mut b).await;
    assert_eq!((&got, from, &data), (&id, a.key.peer_id(), &forged));
    assert_eq!(source, Some(victim.peer_id()), "the event names the signer the envelope claims");
    let verdict = judge(&data, source);
    assert!(matches!(verdict, Verdict::Reject(Reason::BadSignature)), "{verdict:?}");

    // The penalty lands on the peer that sent it, not on the author it named.
    b.handle.report(got, from, Acceptance::Reject).await.unwrap();
    let score = b.handle.peer_score(a.key.peer_id()).await.unwrap().unwrap();
    assert!(score < 0.0, "the forger's score is {score}");
}

#[test]
fn the_author_is_read_from_the_envelope() {
    let key = Keypair::from_seed([191; 32]);
    assert_eq!(actor::envelope_author(&envelope(&key, 1)), Some(key.peer_id()));
    assert_eq!(actor::envelope_author(b"not an envelope"), None);
    assert_eq!(actor::envelope_author(&[]), None);
}

/// Per-message CPU of gossipsub's own signatures, which anonymous gossip no longer spends,
/// beside the envelope check that remains. Prints figures; asserts nothing about time.
/// `cargo test -p druse-protocol --release -- --ignored --nocapture gossipsub_signature_cost`
#[test]
#[ignore = "a measurement: run it by name with --release -- --ignored --nocapture"]
fn gossipsub_signature_cost() {
    const ROUNDS: u32 = 5_000;
    let key = Keypair::from_seed([201; 32]);
    let libp2p_key = key.to_libp2p();
    let peer = key.peer_id();
    // A 1 KiB body in its envelope, then the bytes gossipsub signs for it: the prefix and the
    // protobuf message without signature (author, data, seqno, topic), give or take a few bytes
    // of framing.
    let data = Envelope::seal(&key, Kind::Crystal, &[0x5a; 1024]);
    let mut signed = b"libp2p-pubsub:".to_vec();
    signed.extend_from_slice(&peer.to_bytes());
    signed.extend_from_slice(&data);
    signed.extend_from_slice(&7u64.to_be_bytes());
    signed.extend_from_slice(crate::topic::CRYSTALS.as_bytes());
    let signature = libp2p_key.sign(&signed).unwrap();

    let time = |what: &str, f: &mut dyn FnMut()| {
        for _ in 0..ROUNDS / 10 {
            f();
        }
        let started = Instant::now();
        for _ in 0..ROUNDS {
            f();
        }
        let each = started.elapsed().as_secs_f64() / f64::from(ROUNDS);
        println!("{what:<58} {:>8.2} µs  {:>9.0} per core-second", each * 1e6, 1.0 / each);
        each
    };
    println!("gossip message of {} bytes (envelope of a 1 KiB body), {ROUNDS} rounds each:", data.len());
    let sign = time("publish: gossipsub sign (libp2p-identity ed25519)", &mut || {
        std::hint::black_box(libp2p_key.sign(std::hint::black_box(&signed)).unwrap());
    });
    // What the codec does per signed message in Strict (and Permissive, when signed): the
    // author's PeerId parsed, its key decoded from it (a curve point decompressed), the
    // signature verified.
    let verify = time("receive: gossipsub verify (PeerId -> key decode -> verify)", &mut || {
        let source = PeerId::from_bytes(&peer.to_bytes()).unwrap();
        let public = libp2p::identity::PublicKey::try_decode_protobuf(&source.to_bytes()[2..]).unwrap();
        assert!(public.verify(std::hint::black_box(&signed), &signature));
    });
    let open = time("receive: envelope open (decode, canonical, verify_strict)", &mut || {
        std::hint::black_box(Envelope::open(std::hint::black_box(&data)).unwrap());
    });
    let author = time("receive: envelope author read by the net layer", &mut || {
        std::hint::black_box(actor::envelope_author(std::hint::black_box(&data)).unwrap());
    });
    println!(
        "signature work per received message: signed gossip {:.2} µs, anonymous {:.2} µs ({:.0}% less)",
        (verify + open) * 1e6,
        (open + author) * 1e6,
        100.0 * (1.0 - (open + author) / (verify + open)),
    );
    println!("and per published message: {:.2} µs of gossipsub signing saved", sign * 1e6);
}

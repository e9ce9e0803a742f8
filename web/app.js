"use strict";
// Parley's talk page: one WebRTC call through POST /offer, the `events` data channel, level meters,
// the live transcript and a latency waterfall per turn. Plain JS, nothing fetched from elsewhere.

// Waterfall stages, in order; each is the time since the previous one (see app/trace.py).
const STAGES = [
  ["end_of_turn_delay_ms", "End-of-speech wait"],
  ["asr_ms", "ASR"],
  ["llm_ttft_ms", "LLM first text"],
  ["tts_ttfb_ms", "TTS first audio"],
  ["send_ms", "Send"],
];
const ICE_GATHER_TIMEOUT_MS = 3000;   // host candidates gather in milliseconds; never wait longer than this
const METER_INTERVAL_MS = 50;

const el = {
  talk: document.getElementById("talk"),
  state: document.getElementById("state"),
  error: document.getElementById("error"),
  errorText: document.getElementById("error-text"),
  errorClose: document.getElementById("error-close"),
  transcript: document.getElementById("transcript"),
  hint: document.getElementById("hint"),
  micLevel: document.getElementById("mic-level"),
  agentLevel: document.getElementById("agent-level"),
  remote: document.getElementById("remote"),
};

// What the page knows, readable from the console (and by the browser test).
const status = (window.parley = { state: "idle", remotePeak: 0, micPeak: 0, turns: 0, errors: [] });

let call = null;   // the live call: {pc, dc, stream, audioCtx, meterTimer, turn}

// --- state and errors ----------------------------------------------------------------------------------

function setState(state, label) {
  status.state = state;
  el.state.dataset.state = state;
  el.state.textContent = label;
  const live = state === "connecting" || state === "live";
  el.talk.dataset.action = live ? "hangup" : "start";
  el.talk.textContent = live ? "Hang up" : "Start talking";
}

function showError(message) {
  status.errors.push(message);
  el.errorText.textContent = message;
  el.error.hidden = false;
}

function clearError() {
  el.error.hidden = true;
  el.errorText.textContent = "";
}

// --- the call ------------------------------------------------------------------------------------------

async function startCall() {
  clearError();
  if (!navigator.mediaDevices || !window.RTCPeerConnection) {
    showError("This page needs the microphone and WebRTC: open it over https, or on localhost.");
    return;
  }
  setState("connecting", "Connecting…");
  const pc = new RTCPeerConnection();
  call = { pc, dc: null, stream: null, audioCtx: new AudioContext(), meterTimer: null, turn: null, closed: false };
  try {
    call.stream = await navigator.mediaDevices.getUserMedia({
      audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true },
    });
    call.stream.getAudioTracks().forEach((track) => pc.addTrack(track, call.stream));
    call.dc = openEvents(pc);
    pc.ontrack = (event) => playRemote(event.streams[0] || new MediaStream([event.track]));
    pc.onconnectionstatechange = () => onConnectionState(pc.connectionState);
    startMeters(call.stream);
    await pc.setLocalDescription(await pc.createOffer());
    await iceGathered(pc);
    const answer = await postOffer(pc.localDescription);
    if (!call || call.pc !== pc) return;   // hung up while waiting
    await pc.setRemoteDescription(answer);
  } catch (err) {
    if (!call || call.pc !== pc) return;   // hung up mid-way: nothing went wrong
    endCall("error", "Not connected");
    showError(describe(err));
  }
}

function openEvents(pc) {
  const dc = pc.createDataChannel("events");
  dc.onmessage = (message) => {
    try {
      onEvent(JSON.parse(message.data));
    } catch (err) {
      showError(`Bad event from the server: ${describe(err)}`);
    }
  };
  dc.onclose = () => {
    if (call && call.dc === dc && !call.closed) endCall("idle", "Call ended");
  };
  return dc;
}

function iceGathered(pc) {
  if (pc.iceGatheringState === "complete") return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      if (pc.iceGatheringState !== "complete") return;
      pc.removeEventListener("icegatheringstatechange", done);
      resolve();
    };
    pc.addEventListener("icegatheringstatechange", done);
    setTimeout(resolve, ICE_GATHER_TIMEOUT_MS);
  });
}

// With PARLEY_AUTH_TOKEN, open the page as /?token=...; the offer carries it as a bearer token.
const ACCESS_TOKEN = new URLSearchParams(location.search).get("token");

async function postOffer(offer) {
  const headers = { "Content-Type": "application/json" };
  if (ACCESS_TOKEN) headers.Authorization = `Bearer ${ACCESS_TOKEN}`;
  const response = await fetch("offer", {
    method: "POST",
    headers,
    body: JSON.stringify({ sdp: offer.sdp, type: offer.type }),
  });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.error || `the server answered ${response.status}`);
  return body;
}

function onConnectionState(state) {
  if (!call || call.closed) return;
  if (state === "connected") setState("live", "Live: speak now");
  else if (state === "disconnected") setState("connecting", "Connection interrupted…");
  else if (state === "failed") {
    endCall("error", "Connection failed");
    showError("The connection to Parley failed (a firewall between you and the server, or the server went away).");
  } else if (state === "closed") endCall("idle", "Call ended");
}

function hangUp() {
  if (!call) return;
  const dc = call.dc;
  if (dc && dc.readyState === "open") dc.send(JSON.stringify({ type: "hangup" }));
  endCall("idle", "Call ended");
}

function endCall(state, label) {
  if (!call || call.closed) return;
  const ending = call;
  ending.closed = true;
  clearInterval(ending.meterTimer);
  if (ending.stream) ending.stream.getTracks().forEach((track) => track.stop());
  // Let a just-sent hangup leave before the transport closes under it.
  setTimeout(() => {
    ending.pc.close();
    ending.audioCtx.close();
  }, 150);
  el.remote.srcObject = null;
  el.micLevel.style.width = "0%";
  el.agentLevel.style.width = "0%";
  call = null;
  setState(state, label);
}

// --- audio: remote playback and meters -----------------------------------------------------------------

function playRemote(stream) {
  el.remote.srcObject = stream;   // Chrome only feeds a remote stream to Web Audio while an element plays it
  el.remote.play().catch(() => showError("The browser blocked audio playback: click the page, then try again."));
  if (call) call.remoteAnalyser = analyserFor(stream);
}

function analyserFor(stream) {
  const analyser = call.audioCtx.createAnalyser();
  analyser.fftSize = 1024;
  call.audioCtx.createMediaStreamSource(stream).connect(analyser);
  return analyser;
}

function startMeters(micStream) {
  const mic = analyserFor(micStream);
  const buffer = new Float32Array(mic.fftSize);
  call.meterTimer = setInterval(() => {
    if (!call) return;
    const micRms = rms(mic, buffer);
    const agentRms = call.remoteAnalyser ? rms(call.remoteAnalyser, buffer) : 0;
    status.micPeak = Math.max(status.micPeak, micRms);
    status.remotePeak = Math.max(status.remotePeak, agentRms);
    el.micLevel.style.width = `${levelPercent(micRms)}%`;
    el.agentLevel.style.width = `${levelPercent(agentRms)}%`;
  }, METER_INTERVAL_MS);
}

function rms(analyser, buffer) {
  analyser.getFloatTimeDomainData(buffer);
  let sum = 0;
  for (const x of buffer) sum += x * x;
  return Math.sqrt(sum / buffer.length);
}

function levelPercent(rmsValue) {
  // -60 dBFS .. 0 dBFS mapped onto 0..100 %
  const db = 20 * Math.log10(Math.max(rmsValue, 1e-6));
  return Math.max(0, Math.min(100, ((db + 60) / 60) * 100));
}

// --- events: transcript, reply, tool, metrics, error --------------------------------------------------

function onEvent(event) {
  switch (event.type) {
    case "transcript": return showTranscript(event.text, event.final);
    case "reply": return showReply(event.text, event.final);
    case "tool": return showTool(event);
    case "metrics": return showMetrics(event);
    case "error": return showError(event.message || "Parley reported an error.");
    default: console.warn("unknown event", event);
  }
}

function currentTurn({ forUser }) {
  // A new turn starts when the user speaks after the previous turn's reply (or its final transcript).
  let turn = call && call.turn;
  if (!turn || (forUser && (turn.agent || turn.userFinal))) {
    if (turn && turn.agent && !turn.agent.classList.contains("final")) turn.agent.classList.add("interrupted");
    el.hint.hidden = true;
    const node = document.createElement("article");
    node.className = "turn";
    el.transcript.appendChild(node);
    turn = { node, user: null, userFinal: false, agent: null, tools: [] };
    if (call) call.turn = turn;
  }
  return turn;
}

function message(turn, who) {
  const node = document.createElement("div");
  node.className = `msg ${who}`;
  node.innerHTML = `<span class="who">${who === "user" ? "You" : "Parley"}</span><span class="text"></span>`;
  turn.node.appendChild(node);
  return node;
}

function showTranscript(text, final) {
  const turn = currentTurn({ forUser: true });
  turn.user = turn.user || message(turn, "user");
  turn.user.querySelector(".text").textContent = text;
  turn.user.classList.toggle("final", Boolean(final));
  turn.userFinal = Boolean(final);
  scrollToEnd();
}

function showReply(text, final) {
  const turn = currentTurn({ forUser: false });
  turn.agent = turn.agent || message(turn, "agent");
  turn.agent.querySelector(".text").textContent = text;
  turn.agent.classList.toggle("final", Boolean(final));
  scrollToEnd();
}

function showTool(event) {
  const turn = currentTurn({ forUser: false });
  const node = document.createElement("div");
  node.className = "tool";
  const args = JSON.stringify(event.arguments ?? {});
  const result = JSON.stringify(event.result ?? {});
  node.innerHTML = "<b></b><span></span>";
  node.querySelector("b").textContent = `⚙ ${event.name}`;
  node.querySelector("span").textContent = `(${args}) → ${result}`;
  node.title = `${event.name}(${args}) → ${result}`;
  // tools run before the reply is spoken: keep them above the agent's bubble
  turn.node.insertBefore(node, turn.agent || null);
  scrollToEnd();
}

function showMetrics(metrics) {
  const turn = currentTurn({ forUser: false });
  status.turns += 1;
  turn.node.appendChild(waterfall(metrics));
  scrollToEnd();
}

function waterfall(metrics) {
  const stages = STAGES.filter(([key]) => typeof metrics[key] === "number");
  const total = stages.reduce((sum, [key]) => sum + metrics[key], 0) || 1;
  const node = document.createElement("div");
  node.className = "waterfall";
  const head = document.createElement("div");
  head.className = "wf-head";
  const firstSound = metrics.e2e_latency_ms ?? total;
  head.innerHTML = "<span>From the end of your speech to Parley's first sound</span><b></b>";
  head.querySelector("b").textContent = `${Math.round(firstSound)} ms`;
  node.appendChild(head);
  let start = 0;
  stages.forEach(([key, label], i) => {
    const row = document.createElement("div");
    row.className = "wf-row";
    row.innerHTML = `<span class="wf-label"></span><div class="wf-track"><div class="wf-bar s${i + 1}"></div></div><span class="wf-ms"></span>`;
    row.querySelector(".wf-label").textContent = label;
    row.querySelector(".wf-ms").textContent = `${Math.round(metrics[key])} ms`;
    const bar = row.querySelector(".wf-bar");
    bar.style.left = `${(100 * start) / total}%`;
    bar.style.width = `${(100 * metrics[key]) / total}%`;
    start += metrics[key];
    node.appendChild(row);
  });
  if (typeof metrics.end_of_turn_delay_ms === "number") {
    const decided = document.createElement("div");
    decided.className = "wf-foot";
    decided.textContent = endOfTurnText(metrics);
    node.appendChild(decided);
  }
  if (typeof metrics.llm_passes === "number") {
    const foot = document.createElement("div");
    foot.className = "wf-foot";
    foot.textContent = `LLM: ${metrics.llm_tokens} tokens in ${metrics.llm_passes} denoising passes, ${Math.round(metrics.llm_ms)} ms in all`;
    node.appendChild(foot);
  }
  return node;
}

// Which signal ended the turn: the VAD's fixed silence, or the language model's judgement of the words so far.
function endOfTurnText(metrics) {
  const waited = `${Math.round(metrics.end_of_turn_delay_ms)} ms of silence`;
  if (metrics.end_of_turn === "lm" && typeof metrics.p_complete === "number") {
    return `End of turn: the language model judged the words ${metrics.p_complete >= 0.5 ? "finished" : "unfinished"} (p ${metrics.p_complete.toFixed(2)}) after ${waited}`;
  }
  return `End of turn: the voice detector's ${waited}`;
}

function scrollToEnd() {
  window.scrollTo({ top: document.body.scrollHeight });
}

function describe(err) {
  if (err && err.name === "NotAllowedError") return "Microphone permission was denied: allow it and try again.";
  if (err && err.name === "NotFoundError") return "No microphone was found.";
  return `Could not connect: ${err && err.message ? err.message : err}`;
}

// --- wiring --------------------------------------------------------------------------------------------

el.talk.addEventListener("click", () => (el.talk.dataset.action === "hangup" ? hangUp() : startCall()));
el.errorClose.addEventListener("click", clearError);
window.addEventListener("beforeunload", hangUp);
setState("idle", "Not connected");

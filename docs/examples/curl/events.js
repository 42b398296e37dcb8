// Follow a run from a browser: EventSource resumes by Last-Event-ID by itself.
// (EventSource sends no headers: serve the page from an allowed origin ([http] cors_origins) on a
// runtime without auth, or enable [http] sse_query_token and add ?access_token=...)
const base = "http://127.0.0.1:8080";
const runId = new URLSearchParams(location.search).get("run");
const source = new EventSource(`${base}/v1/runs/${runId}/events`);
source.onmessage = (message) => {
  const event = JSON.parse(message.data); // a RunEvent in proto JSON: runId, seq, one event field
  console.log(message.lastEventId, Object.keys(event));
};
source.addEventListener("end", () => source.close()); // the run is over: stop reconnecting
source.addEventListener("agentrt.error", (message) => {
  console.error(JSON.parse(message.data)); // a Connect error: code, message, details
  source.close();
});

-- wrk script for `../http_turns.sh`: every request is a new message to /v1/chat/completions in
-- one of SESSIONS sessions (picked by the OpenAI `user` field); prints one JSON summary line.
local sessions = tonumber(os.getenv("SESSIONS") or "1000")
local model = os.getenv("MODEL") or "fake-model"
local counter = 0
local next_thread = 0
function setup(thread) thread:set("tid", next_thread); next_thread = next_thread + 1 end
function init(args) counter = tid * 100000000 end
function request()
  counter = counter + 1
  local body = '{"model":"' .. model .. '","user":"s' .. (counter % sessions) ..
    '","messages":[{"role":"user","content":"msg ' .. counter .. '"}]}'
  return wrk.format("POST", "/v1/chat/completions", {["Content-Type"] = "application/json"}, body)
end
function done(summary, latency, requests)
  io.write(string.format('JSON {"requests":%d,"non2xx":%d,"timeouts":%d,"seconds":%.3f,"p50_ms":%.3f,"p99_ms":%.3f,"mean_ms":%.3f}\n',
    summary.requests, summary.errors.status, summary.errors.timeout, summary.duration / 1e6,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.mean / 1000))
end

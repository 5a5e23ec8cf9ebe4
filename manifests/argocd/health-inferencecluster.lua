-- Argo CD health check for sparkllm.io/InferenceCluster (Lua, run by Argo CD's gopher-lua).
-- Install: argocd-cm key `resource.customizations.health.sparkllm.io_InferenceCluster`
-- (argocd-cm-health.yaml beside this file).
--
-- Healthy:     Ready=True and status.observedGeneration == metadata.generation.
-- Progressing: the operator has not observed the current spec yet, or the model is
--              pending, starting or restarting.
-- Suspended:   phase Stopped (spec.replicas is 0): nothing runs and nothing serves, on
--              purpose. Not Healthy (no model answers), not Degraded (nothing is wrong):
--              Argo CD's word for a resource paused on purpose (a paused Deployment, a
--              suspended CronJob).
-- Degraded:    phase Failed (e.g. an invalid spec) or Degraded (a replica gave up
--              restarting), or Progressing=False (the operator cannot progress, e.g.
--              InsufficientNodeGroups, NodeGroupInUse, Unschedulable).
local hs = {}

local function condition(status, kind)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function says(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return fallback
end

local status = obj.status
local generation = obj.metadata.generation or 0
if status == nil or status.observedGeneration == nil or status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end

local ready = condition(status, "Ready")
local progressing = condition(status, "Progressing")
local degraded = condition(status, "Degraded")
local phase = status.phase or "Pending"

if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = says(ready, tostring(status.readyReplicas or 0) .. " of " ..
    tostring(status.replicas or 0) .. " replicas ready")
  return hs
end
if phase == "Stopped" then
  hs.status = "Suspended"
  hs.message = "Stopped: " .. says(ready, "spec.replicas is 0")
  return hs
end
if phase == "Failed" or phase == "Degraded" then
  hs.status = "Degraded"
  hs.message = phase .. ": " .. says(degraded, says(ready, "see kubectl describe"))
  return hs
end
if progressing ~= nil and progressing.status == "False" then
  hs.status = "Degraded"
  hs.message = (progressing.reason or "NotProgressing") .. ": " .. says(progressing, "cannot progress")
  return hs
end
hs.status = "Progressing"
hs.message = phase .. ": " .. says(ready, "not ready yet")
return hs

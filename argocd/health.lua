-- Argo CD health of a HyperFleet resource, from the kstatus conditions every
-- kind carries (Ready, Reconciling, Stalled, each with observedGeneration):
--   Stalled=True                      Degraded: a person must change something
--   Reconciling=True, or status older than the spec, or no status yet
--                                     Progressing
--   Ready=True                        Healthy; with phase Terminated the work is
--                                     over as planned (a completed Job is Healthy too)
--   phase Terminated, Ready=False     Healthy: as earlier versions of the operator wrote it
--   Ready=False/Unknown otherwise     Progressing: waiting on something the operator retries
-- make chart writes this script into argocd/argocd-cm-patch.yaml once per kind.
local hs = {}

local function describe(c)
  local reason = c.reason or ""
  if c.message ~= nil and c.message ~= "" then
    if reason ~= "" then
      return reason .. ": " .. c.message
    end
    return c.message
  end
  return reason
end

if obj.metadata ~= nil and obj.metadata.deletionTimestamp ~= nil then
  hs.status = "Progressing"
  hs.message = "Being deleted: the operator is cleaning up"
  return hs
end

if obj.status == nil or obj.status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to report status"
  return hs
end

local generation = obj.metadata.generation
local observed = obj.status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end

local ready, reconciling, stalled
for _, c in ipairs(obj.status.conditions) do
  if c.type == "Ready" then
    ready = c
  elseif c.type == "Reconciling" then
    reconciling = c
  elseif c.type == "Stalled" then
    stalled = c
  end
end

if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(stalled)
  return hs
end
if reconciling ~= nil and reconciling.status == "True" then
  hs.status = "Progressing"
  hs.message = describe(reconciling)
  return hs
end
if ready == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the Ready condition"
  return hs
end
if ready.observedGeneration ~= nil and generation ~= nil and ready.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end
if ready.status == "True" then
  hs.status = "Healthy"
  hs.message = describe(ready)
  if obj.status.phase == "Terminated" then
    hs.message = "Terminated: " .. hs.message
  end
  return hs
end
if obj.status.phase == "Terminated" then
  hs.status = "Healthy"
  hs.message = "Terminated: " .. describe(ready)
  return hs
end
hs.status = "Progressing"
hs.message = describe(ready)
return hs

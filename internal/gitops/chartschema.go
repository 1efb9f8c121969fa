package gitops

// chartSchema is the chart's values.schema.json: Helm refuses values that
// break it before it renders anything, so a misspelt key (replica) or a
// wrong type fails the install with the key's name rather than rendering a
// Deployment the API server refuses, or silently ignoring the key. Keep it
// beside chartValues: a value added there needs its entry here (the chart's
// tests render the defaults through it).
const chartSchema = `{
  "$schema": "https://json-schema.org/draft-07/schema#",
  "title": "Values of the hyperfleet chart",
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "global": {"type": "object"},
    "image": {
      "type": "object",
      "additionalProperties": false,
      "properties": {
        "repository": {"type": "string", "minLength": 1},
        "tag": {"type": "string"},
        "digest": {"type": "string", "pattern": "^(sha256:[0-9a-f]{64})?$"},
        "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]}
      }
    },
    "replicas": {"type": "integer", "minimum": 0},
    "resources": {"type": "object"},
    "logLevel": {"type": "string", "minLength": 1},
    "nodeSelector": {"type": "object", "additionalProperties": {"type": "string"}},
    "tolerations": {"type": "array", "items": {"type": "object"}},
    "affinity": {"type": "object"},
    "topologySpreadConstraints": {"type": "array", "items": {"type": "object"}},
    "imagePullSecrets": {
      "type": "array",
      "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}
    },
    "podAnnotations": {"type": "object", "additionalProperties": {"type": "string"}},
    "extraArgs": {"type": "array", "items": {"type": "string", "pattern": "^--"}},
    "monitoring": {
      "type": "object",
      "additionalProperties": false,
      "properties": {"enabled": {"type": "boolean"}}
    },
    "hourglassOnly": {
      "type": "object",
      "additionalProperties": false,
      "properties": {"enabled": {"type": "boolean"}}
    },
    "podDisruptionBudget": {
      "type": "object",
      "additionalProperties": false,
      "properties": {"enabled": {"type": "boolean"}, "minAvailable": {"type": ["integer", "string"]}}
    },
    "webhookIngress": {
      "type": "object",
      "additionalProperties": false,
      "properties": {"enabled": {"type": "boolean"}, "host": {"type": "string", "minLength": 1}}
    },
    "externalSecrets": {
      "type": "object",
      "additionalProperties": false,
      "properties": {
        "store": {"type": "string", "minLength": 1},
        "proxmox": {"type": "object", "additionalProperties": false, "properties": {"enabled": {"type": "boolean"}}},
        "github": {"type": "object", "additionalProperties": false, "properties": {"enabled": {"type": "boolean"}}},
        "supabase": {"type": "object", "additionalProperties": false, "properties": {"enabled": {"type": "boolean"}}},
        "hourglass": {"type": "object", "additionalProperties": false, "properties": {"enabled": {"type": "boolean"}}}
      }
    },
    "machineClaimFinalizerPolicy": {
      "type": "object",
      "additionalProperties": false,
      "properties": {"enabled": {"type": "boolean"}}
    }
  }
}
`

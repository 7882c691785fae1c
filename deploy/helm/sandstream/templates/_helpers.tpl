{{/* Names, labels, the image, the API key's Secret, etcd's endpoints and the daemon's flags. */}}

{{- define "sandstream.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 44 | trimSuffix "-" -}}
{{- end -}}

{{/* At most 44 characters: "-gateway" and "-etcd-N" still fit the limits of the names
Kubernetes derives from them. */}}
{{- define "sandstream.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 44 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 44 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 44 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "sandstream.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sandstream.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Called with (dict "root" $ "component" "node"). */}}
{{- define "sandstream.labels" -}}
{{ include "sandstream.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "sandstream.image" -}}
{{- $repository := required "sandstream: image.repository is required (build packaging/Containerfile and push it)" .Values.image.repository -}}
{{- printf "%s:%s" $repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The Secret holding the API key, and its key in it; fails without one. */}}
{{- define "sandstream.apiKeySecretName" -}}
{{- if and .Values.apiKey.existingSecret .Values.apiKey.value -}}
{{- fail "sandstream: set apiKey.existingSecret or apiKey.value, not both" -}}
{{- else if .Values.apiKey.existingSecret -}}
{{- .Values.apiKey.existingSecret -}}
{{- else if .Values.apiKey.value -}}
{{- printf "%s-api-key" (include "sandstream.fullname" .) -}}
{{- else -}}
{{- fail "sandstream: no API key: set apiKey.existingSecret to a Secret holding it, or apiKey.value (the chart keeps it in a Secret); there is no default key" -}}
{{- end -}}
{{- end -}}

{{- define "sandstream.apiKeySecretKey" -}}
{{- if .Values.apiKey.existingSecret -}}
{{- required "sandstream: apiKey.existingSecretKey names the key in apiKey.existingSecret" .Values.apiKey.existingSecretKey -}}
{{- else -}}
api-key
{{- end -}}
{{- end -}}

{{- define "sandstream.etcdName" -}}
{{- printf "%s-etcd" (include "sandstream.fullname" .) -}}
{{- end -}}

{{- define "sandstream.etcdReplicas" -}}
{{- $n := int .Values.etcd.replicas -}}
{{- if not (has $n (list 1 3 5)) -}}
{{- fail (printf "sandstream: etcd.replicas must be 1, 3 or 5, not %v" .Values.etcd.replicas) -}}
{{- end -}}
{{- $n -}}
{{- end -}}

{{/* etcd member i's DNS name, through the headless Service. Called with (list $ i). */}}
{{- define "sandstream.etcdHost" -}}
{{- $root := index . 0 -}}
{{- $name := include "sandstream.etcdName" $root -}}
{{- printf "%s-%d.%s.%s.svc.%s" $name (index . 1) $name $root.Release.Namespace $root.Values.clusterDomain -}}
{{- end -}}

{{/* The etcd client URLs nodes and gateways use, comma-separated. */}}
{{- define "sandstream.etcdEndpoints" -}}
{{- $external := .Values.etcd.endpoints -}}
{{- if kindIs "slice" $external -}}
{{- $external = join "," $external -}}
{{- end -}}
{{- $external = toString (default "" $external) | trim -}}
{{- if .Values.etcd.enabled -}}
{{- if $external -}}
{{- fail "sandstream: etcd.endpoints names an etcd of yours: set etcd.enabled=false too" -}}
{{- end -}}
{{- $urls := list -}}
{{- range $i := until (int (include "sandstream.etcdReplicas" .)) -}}
{{- $urls = append $urls (printf "http://%s:2379" (include "sandstream.etcdHost" (list $ $i))) -}}
{{- end -}}
{{- join "," $urls -}}
{{- else -}}
{{- required "sandstream: etcd.enabled is false: set etcd.endpoints to your etcd's client URLs (http://host:2379)" $external -}}
{{- end -}}
{{- end -}}

{{/* A setting's value as the daemon reads it: values.yaml numbers arrive as float64, and
8589934592 must not become 8.589934592e+09. */}}
{{- define "sandstream.settingValue" -}}
{{- if and (kindIs "float64" .) (eq . (floor .)) -}}
{{- int64 . -}}
{{- else if kindIs "invalid" . -}}
{{- else -}}
{{- . -}}
{{- end -}}
{{- end -}}

{{/* Flags of a dict of settings, as YAML list items. Called with (dict "settings" ...). */}}
{{- define "sandstream.flags" -}}
{{- $reserved := list "role" "node_id" "advertise" "listen" "data_dir" "etcd" "etcd_prefix" "api_key" "teardown_on_exit" "cgroup_parent" "gateway_nodes" "config" -}}
{{- range $name, $value := .settings }}
{{- $key := replace "-" "_" $name }}
{{- if has $key $reserved }}
{{- fail (printf "sandstream: %s is set by the chart, not in settings" $key) }}
{{- end }}
- {{ printf "--%s=%s" (replace "_" "-" $key) (include "sandstream.settingValue" $value) | toJson }}
{{- end }}
{{- end -}}

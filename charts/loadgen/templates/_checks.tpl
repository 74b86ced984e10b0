{{/* What `loadgen validate` refuses because the scenario would hold a credential, refused at render time: the
ConfigMap would hold it, and the release never gets as far as the master's `validate` init container (which checks
all the rest before any load). Each failure names the field; none quotes a value, which may be a key pasted in the
wrong place. The lists of what looks like a credential are loadgen's own (_credentials.tpl, generated from
loadgen/config/credentials.py). Included by every template that holds the scenario or its credentials. */}}
{{- define "loadgen.checkScenario" -}}
{{- include "loadgen.checkEnvNames" . -}}
{{- include "loadgen.checkHeaders" . -}}
{{- $sc := .Values.scenario -}}
{{- /* The web UI starts one run with every variant: a sequential scenario is refused here rather than by a master
that would exit 2 at its start (locust_plugin/plugin.py); headless, the master runs the variants in turn. */ -}}
{{- if and (ne .Values.mode "headless") (dig "load" "sequential" false $sc) (gt (len ($sc.variants | default list)) 1) -}}
{{- fail "scenario load.sequential: mode ui (the web UI) starts one run with every variant at once and cannot run them one after another; set mode: headless, whose master runs each variant in turn with the same workers and writes one report (or load.sequential: false if the variants do not share a GPU)" -}}
{{- end -}}
{{- range $i, $v := ($sc.variants | default list) -}}
{{- include "loadgen.checkBody" (dict "at" (printf "variants[%d].extra_body" $i) "value" ($v.extra_body | default dict)) -}}
{{- include "loadgen.checkUrl" (dict "at" (printf "variants[%d].base_url" $i) "url" $v.base_url "instead" "set api_key_env to the NAME of an environment variable holding the key") -}}
{{- end -}}
{{- $prom := dig "metrics" "prometheus" dict $sc | default dict -}}
{{- include "loadgen.checkUrl" (dict "at" "metrics.prometheus.url" "url" $prom.url "instead" "give bearer_token_env or basic_auth_env, the NAMES of environment variables holding them") -}}
{{- include "loadgen.checkUrl" (dict "at" "tracing.otlp_endpoint" "url" (dig "tracing" "otlp_endpoint" "" $sc) "instead" "put them in the environment variable OTEL_EXPORTER_OTLP_HEADERS (extraEnv, from a Secret)") -}}
{{- end -}}

{{/* Every field that names the environment variable a credential comes from holds a NAME, checked before the
name is looked up in apiKeySecrets (whose failure names it). */}}
{{- define "loadgen.checkEnvNames" -}}
{{- $name := include "loadgen.envNamePattern" . -}}
{{- range concat (include "loadgen.secretNames" (dict "root" . "pod" "workers") | fromJsonArray) (include "loadgen.secretNames" (dict "root" . "pod" "master") | fromJsonArray) -}}
{{- if not (regexMatch $name (toString (index . 1))) -}}
{{- fail (printf "scenario %s: expected the NAME of an environment variable holding the credential (letters, digits, '_'; e.g. OPENAI_API_KEY), not the credential itself" (index . 0)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A literal credential in the scenario's headers: refused (loadgen's is_credential_header), naming the header and
where its value belongs. */}}
{{- define "loadgen.checkHeaders" -}}
{{- $where := list -}}
{{- range $i, $v := (.Values.scenario.variants | default list) -}}
{{- $where = append $where (list (printf "variants[%d]" $i) ($v.headers | default dict)) -}}
{{- end -}}
{{- range $i, $c := (dig "traffic" "classes" list .Values.scenario | default list) -}}
{{- $where = append $where (list (printf "traffic.classes[%d]" $i) ($c.headers | default dict)) -}}
{{- end -}}
{{- range $where -}}
{{- $at := index . 0 -}}
{{- range $h, $_ := index . 1 -}}
{{- if include "loadgen.isCredentialHeader" $h -}}
{{- fail (printf "scenario %s.headers.%s looks like a credential, and the scenario ConfigMap would hold its value: name an environment variable in headers_from_env instead, filled from a Secret by apiKeySecrets" $at $h) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "true" when a header of this name carries a credential (loadgen's is_credential_header), else "". */}}
{{- define "loadgen.isCredentialHeader" -}}
{{- $low := lower (toString .) -}}
{{- range (include "loadgen.credentialHeaderParts" . | fromJsonArray) -}}
{{- if contains . $low }}true{{ end -}}
{{- end -}}
{{- end -}}

{{/* "true" when a JSON body field of this name holds a credential (loadgen's is_credential_field), else "". */}}
{{- define "loadgen.isCredentialField" -}}
{{- $snake := lower (regexReplaceAll (include "loadgen.camelCasePattern" .) (toString .) "${1}_${2}") -}}
{{- if regexMatch (include "loadgen.credentialFieldPattern" .) $snake }}true{{ end -}}
{{- end -}}

{{/* A key of a JSON body (`extra_body`, any depth, in lists too) that names a credential (loadgen's
credential_key): `.at` is the field path of `.value`. */}}
{{- define "loadgen.checkBody" -}}
{{- $at := .at -}}
{{- if kindIs "map" .value -}}
{{- range $k, $v := .value -}}
{{- if include "loadgen.isCredentialField" $k -}}
{{- fail (printf "scenario %s.%s looks like a credential, and the scenario ConfigMap would hold its value: send it as a header from the environment (headers_from_env, filled from a Secret by apiKeySecrets) or the key in api_key_env" $at $k) -}}
{{- end -}}
{{- include "loadgen.checkBody" (dict "at" (printf "%s.%s" $at $k) "value" $v) -}}
{{- end -}}
{{- else if kindIs "slice" .value -}}
{{- range $i, $v := .value -}}
{{- include "loadgen.checkBody" (dict "at" (printf "%s[%d]" $at $i) "value" $v) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A URL (`.url`, at `.at`) with user info (`https://user:pass@host`) or a query, where a token may ride. */}}
{{- define "loadgen.checkUrl" -}}
{{- $url := toString (.url | default "") -}}
{{- if regexMatch "^[^/?#]*//[^/?#]*@" $url -}}
{{- fail (printf "scenario %s holds credentials (user info before '@'), and the scenario ConfigMap would hold them: %s" .at .instead) -}}
{{- end -}}
{{- if contains "?" $url -}}
{{- fail (printf "scenario %s has a query, where a token may ride, and the scenario ConfigMap would hold it: give the URL without one" .at) -}}
{{- end -}}
{{- end -}}

{{/* Object names: <release>-loadgen unless overridden; trimmed to 52 so "-master"/"-scenario" fit in 63. */}}
{{- define "loadgen.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "loadgen.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "loadgen.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "loadgen.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: loadgen
{{- end -}}

{{/* Selector labels: never change after install (component is master or worker). */}}
{{- define "loadgen.selectorLabels" -}}
app.kubernetes.io/name: {{ include "loadgen.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "loadgen.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "loadgen.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "loadgen.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ default .Chart.AppVersion .Values.image.tag }}
{{- end -}}
{{- end -}}

{{- define "loadgen.targetNamespace" -}}
{{- default .Release.Namespace .Values.rbac.targetNamespace -}}
{{- end -}}

{{/* The scenario as mounted: the value with report_dir pointing at the reports emptyDir. */}}
{{- define "loadgen.scenarioYaml" -}}
{{- toYaml (merge (dict "report_dir" "/reports") (omit .Values.scenario "report_dir")) -}}
{{- end -}}

{{/* Names of the Secrets the chart creates when the values ask for them. */}}
{{- define "loadgen.webLoginSecret" -}}
{{- default (printf "%s-web-login" (include "loadgen.fullname" .)) .Values.webAuth.existingSecret -}}
{{- end -}}

{{- define "loadgen.doneTokenSecret" -}}
{{- printf "%s-done-token" (include "loadgen.fullname" .) -}}
{{- end -}}

{{/* Whether the ui master runs with --web-login; whether the headless master has a report window (and a token). */}}
{{- define "loadgen.webLogin" -}}
{{- if and (eq .Values.mode "ui") .Values.webAuth.enabled }}true{{ end -}}
{{- end -}}

{{- define "loadgen.doneToken" -}}
{{- if and (eq .Values.mode "headless") .Values.headless.serveReports }}true{{ end -}}
{{- end -}}

{{/* The environment variables a pod reads credentials from, as a JSON list of [field, NAME]: the workers, every
variant's api_key_env and headers_from_env (they send the requests); the master, the Prometheus credentials (it
queries the cluster's Prometheus) and, with `tokenizer: server`, the first variant's (the scenario's check POSTs
/tokenize from every process that loads it). Nothing else: the master sends no request to the targets. */}}
{{- define "loadgen.secretNames" -}}
{{- $sc := .root.Values.scenario -}}
{{- $variants := $sc.variants | default list -}}
{{- $out := list -}}
{{- $from := list -}}
{{- if eq .pod "workers" -}}
{{- $from = $variants -}}
{{- else -}}
{{- $prom := dig "metrics" "prometheus" dict $sc | default dict -}}
{{- with $prom.bearer_token_env }}{{ $out = append $out (list "metrics.prometheus.bearer_token_env" .) }}{{ end -}}
{{- with $prom.basic_auth_env -}}
{{- with .username }}{{ $out = append $out (list "metrics.prometheus.basic_auth_env.username" .) }}{{ end -}}
{{- with .password }}{{ $out = append $out (list "metrics.prometheus.basic_auth_env.password" .) }}{{ end -}}
{{- end -}}
{{- if and (eq (toString ($sc.tokenizer | default "")) "server") $variants -}}
{{- $from = list (first $variants) -}}
{{- end -}}
{{- end -}}
{{- range $i, $v := $from -}}
{{- with $v.api_key_env }}{{ $out = append $out (list (printf "variants[%d].api_key_env" $i) .) }}{{ end -}}
{{- range $h, $n := ($v.headers_from_env | default dict) -}}
{{- $out = append $out (list (printf "variants[%d].headers_from_env.%s" $i $h) $n) -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* Env of a pod (`pod`: master, workers, or validate, the master's init container): one secretKeyRef per
credential variable it reads (each required in apiKeySecrets; validate reads the master's), the master's own (the web
login in ui mode, the report window's token in headless), then extraEnv. */}}
{{- define "loadgen.env" -}}
{{- $root := .root -}}
{{- include "loadgen.checkScenario" $root -}}
{{- $seen := dict -}}
{{- range (include "loadgen.secretNames" . | fromJsonArray) }}
{{- $field := index . 0 }}
{{- $name := index . 1 }}
{{- if not (hasKey $seen $name) }}
{{- $_ := set $seen $name true }}
{{- $ref := index $root.Values.apiKeySecrets $name | default dict }}
{{- if not (and $ref.name $ref.key) }}
{{- fail (printf "scenario %s names environment variable %s, which has no apiKeySecrets.%s {name, key}" $field $name $name) }}
{{- end }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef:
      name: {{ $ref.name }}
      key: {{ $ref.key }}
{{- end }}
{{- end }}
{{- if and (eq .pod "master") (include "loadgen.webLogin" $root) }}
- name: LOADGEN_WEB_USERNAME
  value: {{ $root.Values.webAuth.username | quote }}
- name: LOADGEN_WEB_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "loadgen.webLoginSecret" $root }}
      key: password
{{- end }}
{{- if and (eq .pod "master") (include "loadgen.doneToken" $root) }}
- name: LOADGEN_DONE_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "loadgen.doneTokenSecret" $root }}
      key: token
{{- end }}
{{- with $root.Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "loadgen.volumes" -}}
- name: scenario
  configMap:
    name: {{ include "loadgen.fullname" . }}-scenario
- name: reports
  emptyDir:
    sizeLimit: {{ .Values.reportsSizeLimit }}
- name: tmp
  emptyDir:
    sizeLimit: 256Mi
{{- end -}}

{{- define "loadgen.volumeMounts" -}}
- name: scenario
  mountPath: /etc/loadgen
  readOnly: true
- name: reports
  mountPath: /reports
- name: tmp
  mountPath: /tmp
{{- end -}}

{{/* Pod-level settings shared by every pod; `pod` is master or workers. */}}
{{- define "loadgen.podCommon" -}}
{{- $pod := index .root.Values .pod -}}
serviceAccountName: {{ include "loadgen.serviceAccountName" .root }}
automountServiceAccountToken: {{ and .root.Values.rbac.podMetrics (eq .pod "master") }}
enableServiceLinks: false
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $pod.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $pod.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $pod.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
volumes:
  {{- include "loadgen.volumes" .root | nindent 2 }}
{{- end -}}

{{- define "loadgen.podAnnotations" -}}
checksum/config: {{ include (print .root.Template.BasePath "/configmap.yaml") .root | sha256sum }}
{{- with (index .root.Values .pod).podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "loadgen.podLabels" -}}
{{ include "loadgen.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- with (index .root.Values .pod).podLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The worker pod (same in both modes). */}}
{{- define "loadgen.workerPodSpec" -}}
{{ include "loadgen.podCommon" (dict "root" . "pod" "workers") }}
{{- if .Values.workers.topologySpread.enabled }}
topologySpreadConstraints:
  - maxSkew: {{ .Values.workers.topologySpread.maxSkew }}
    topologyKey: {{ .Values.workers.topologySpread.topologyKey }}
    whenUnsatisfiable: {{ .Values.workers.topologySpread.whenUnsatisfiable }}
    labelSelector:
      matchLabels:
        {{- include "loadgen.selectorLabels" (dict "root" . "component" "worker") | nindent 8 }}
{{- end }}
containers:
  - name: worker
    image: {{ include "loadgen.image" . }}
    imagePullPolicy: {{ .Values.image.pullPolicy }}
    command: ["locust"]
    args:
      - -f
      - {{ .Values.locustfile }}
      - --scenario
      - /etc/loadgen/scenario.yaml
      - --report-dir
      - /reports
      - --worker
      - --master-host
      - {{ include "loadgen.fullname" . }}-master
      - --master-port
      - {{ .Values.service.zmqPort | quote }}
      {{- range .Values.workers.extraArgs }}
      - {{ . | quote }}
      {{- end }}
    {{- with (include "loadgen.env" (dict "root" . "pod" "workers")) }}
    env:
      {{- . | nindent 6 }}
    {{- end }}
    securityContext:
      {{- toYaml .Values.securityContext | nindent 6 }}
    resources:
      {{- toYaml .Values.workers.resources | nindent 6 }}
    volumeMounts:
      {{- include "loadgen.volumeMounts" . | nindent 6 }}
{{- end -}}

{{/* The master pod's init container: `loadgen validate` on the mounted scenario, before Locust starts and any
load is sent, with the master's credentials (a `tokenizer: server` check asks the first variant). A scenario loadgen
refuses (a dataset or tokenizer the pod cannot load, any rule of the model) stops the pod here with exit 2, and
`loadgen validate`'s message, naming the field, is the container's termination message (`kubectl describe pod`, the
headless Job's failure; `kubectl logs <pod> -c validate`). */}}
{{- define "loadgen.validateContainer" -}}
- name: validate
  image: {{ include "loadgen.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  command: ["loadgen", "validate", "/etc/loadgen/scenario.yaml"]
  terminationMessagePolicy: FallbackToLogsOnError
  {{- with (include "loadgen.env" (dict "root" . "pod" "validate")) }}
  env:
    {{- . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  resources:
    {{- toYaml .Values.master.resources | nindent 4 }}
  volumeMounts:
    {{- include "loadgen.volumeMounts" . | nindent 4 }}
{{- end -}}

{{/* The master container; headless wraps locust in the report server. */}}
{{- define "loadgen.masterContainer" -}}
- name: master
  image: {{ include "loadgen.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  {{- $headless := eq .Values.mode "headless" }}
  {{- if and $headless .Values.headless.serveReports }}
  command: ["python", "-m", "loadgen.report.serve", "--dir", "/reports", "--for", {{ .Values.headless.serveReports | quote }}, "--port", {{ .Values.service.webPort | quote }}, "--host", "0.0.0.0", "--", "locust"]
  {{- else }}
  command: ["locust"]
  {{- end }}
  args:
    - -f
    - {{ .Values.locustfile }}
    - --scenario
    - /etc/loadgen/scenario.yaml
    - --report-dir
    - /reports
    - --master
    - --master-bind-port
    - {{ .Values.service.zmqPort | quote }}
    {{- if $headless }}
    - --headless
    - --only-summary
    - --expect-workers
    - {{ .Values.workers.replicas | quote }}
    - --expect-workers-max-wait
    - {{ .Values.headless.expectWorkersMaxWait | quote }}
    {{- with .Values.headless.duration }}
    - --loadgen-duration
    - {{ . | quote }}
    {{- end }}
    {{- else }}
    - --web-port
    - {{ .Values.service.webPort | quote }}
    {{- if include "loadgen.webLogin" . }}
    - --web-login
    {{- end }}
    {{- end }}
    {{- if .Values.metrics.enabled }}
    - --metrics-port
    - {{ .Values.metrics.port | quote }}
    {{- end }}
    {{- range .Values.master.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  ports:
    - name: web
      containerPort: {{ .Values.service.webPort }}
    - name: zmq
      containerPort: {{ .Values.service.zmqPort }}
    {{- if .Values.metrics.enabled }}
    - name: metrics
      containerPort: {{ .Values.metrics.port }}
    {{- end }}
  {{- with (include "loadgen.env" (dict "root" . "pod" "master")) }}
  env:
    {{- . | nindent 4 }}
  {{- end }}
  {{- if not $headless }}
  readinessProbe:
    httpGet:
      path: /
      port: web
    periodSeconds: 10
  livenessProbe:
    tcpSocket:
      port: web
    initialDelaySeconds: 15
    periodSeconds: 20
  {{- end }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  resources:
    {{- toYaml .Values.master.resources | nindent 4 }}
  volumeMounts:
    {{- include "loadgen.volumeMounts" . | nindent 4 }}
{{- end -}}

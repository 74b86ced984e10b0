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

{{/* Env of master and workers: one secretKeyRef per variant's api_key_env (required), then extraEnv. */}}
{{- define "loadgen.env" -}}
{{- $seen := dict -}}
{{- range .Values.scenario.variants }}
{{- with .api_key_env }}
{{- if not (hasKey $seen .) }}
{{- $_ := set $seen . true }}
{{- $ref := index $.Values.apiKeySecrets . | default dict }}
{{- if not (and $ref.name $ref.key) }}
{{- fail (printf "scenario variant api_key_env %s has no apiKeySecrets.%s {name, key}" . .) }}
{{- end }}
- name: {{ . }}
  valueFrom:
    secretKeyRef:
      name: {{ $ref.name }}
      key: {{ $ref.key }}
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.extraEnv }}
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
automountServiceAccountToken: {{ and .root.Values.rbac.discovery (eq .pod "master") }}
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
    {{- with (include "loadgen.env" .) }}
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

{{/* The master container; headless wraps locust in the report server. */}}
{{- define "loadgen.masterContainer" -}}
- name: master
  image: {{ include "loadgen.image" . }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  {{- $headless := eq .Values.mode "headless" }}
  {{- if and $headless .Values.headless.serveReports }}
  command: ["python", "-m", "loadgen.report.serve", "--dir", "/reports", "--for", {{ .Values.headless.serveReports | quote }}, "--port", {{ .Values.service.webPort | quote }}, "--", "locust"]
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
  {{- with (include "loadgen.env" .) }}
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

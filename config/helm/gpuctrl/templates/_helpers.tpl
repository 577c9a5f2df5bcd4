{{- /* Labels Helm's own tooling expects; the kustomize manifests do not carry them. */}}
{{- define "gpuctrl.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- /* What selects a component's pods. */}}
{{- define "gpuctrl.selector" -}}
app.kubernetes.io/name: gpuctrl
app.kubernetes.io/component: {{ . }}
{{- end }}

{{- /* A component's pod labels. Never app.kubernetes.io/managed-by: gpuctrl, which the
  webhook's objectSelector matches: the operator's own pods must not wait for the webhook. */}}
{{- define "gpuctrl.podLabels" -}}
app.kubernetes.io/name: gpuctrl
app.kubernetes.io/part-of: gpuctrl
app.kubernetes.io/component: {{ . }}
{{- end }}

{{- /* An object's labels; call with (list $ "component"). */}}
{{- define "gpuctrl.labels" -}}
{{ include "gpuctrl.podLabels" (index . 1) }}
{{ include "gpuctrl.helmLabels" (index . 0) }}
{{- end }}

{{- define "gpuctrl.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if hasPrefix "sha256:" $tag -}}
{{ printf "%s/%s@%s" .Values.image.repository .Values.image.name $tag }}
{{- else -}}
{{ printf "%s/%s:%s" .Values.image.repository .Values.image.name $tag }}
{{- end -}}
{{- end }}

{{- /* Whether a value is unset the way NVIDIA's chart reads it: null, "", {} or []
  (false and 0 are values). */}}
{{- define "gpuctrl.unset" -}}
{{- if or (kindIs "invalid" .) (and (kindIs "string" .) (eq . "")) (and (kindIs "map" .) (empty .)) (and (kindIs "slice" .) (empty .)) -}}
true
{{- end -}}
{{- end }}

{{- /* (list map path): the value at `path` (a list of keys) in `map`, "" where there is none. */}}
{{- define "gpuctrl.valueAt" -}}
{{- $value := index . 0 -}}
{{- range $key := index . 1 -}}
{{- if kindIs "map" $value -}}
{{- $value = get $value $key -}}
{{- else -}}
{{- $value = "" -}}
{{- end -}}
{{- end -}}
{{- toString $value -}}
{{- end }}

{{- /* Whether a value sets nothing: unset, or a map of such values. */}}
{{- define "gpuctrl.blank" -}}
{{- if include "gpuctrl.unset" . -}}
true
{{- else if kindIs "map" . -}}
{{- $blank := true -}}
{{- range $key, $value := . -}}
{{- if not (include "gpuctrl.blank" $value) -}}
{{- $blank = false -}}
{{- end -}}
{{- end -}}
{{- if $blank -}}
true
{{- end -}}
{{- end -}}
{{- end }}

{{- /* (list values fields): the keys of the `values` map that `fields` names, recursively
  (a field `true` is copied whole; "intOrString" too, a quoted number as a number), leaving
  out unset ones; JSON. */}}
{{- define "gpuctrl.pick" -}}
{{- $values := index . 0 -}}
{{- $fields := index . 1 -}}
{{- $out := dict -}}
{{- if kindIs "map" $values -}}
{{- range $key, $field := $fields -}}
{{- if hasKey $values $key -}}
{{- $value := get $values $key -}}
{{- if kindIs "map" $field -}}
{{- $value = include "gpuctrl.pick" (list $value $field) | fromJson -}}
{{- else if and (eq (toString $field) "intOrString") (kindIs "string" $value) (regexMatch "^[0-9]+$" $value) -}}
{{- $value = atoi $value -}}
{{- end -}}
{{- if not (include "gpuctrl.unset" $value) -}}
{{- $_ := set $out $key $value -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end }}

{{- /* A Deployment of the operator: (dict "root" $ "component" "manager" "values" ...
  "args" (list ...) "ports" (list ...) "volumes" (list ...) "volumeMounts" (list ...)). */}}
{{- define "gpuctrl.deployment" -}}
{{- $root := .root -}}
{{- $component := .component -}}
{{- $values := .values -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: gpuctrl-{{ $component }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "gpuctrl.labels" (list $root $component) | nindent 4 }}
spec:
  replicas: {{ $values.replicas }}
  selector:
    matchLabels:
      {{- include "gpuctrl.selector" $component | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "gpuctrl.podLabels" $component | nindent 8 }}
        {{- with $values.labels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with $values.annotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: gpuctrl-{{ $component }}
      {{- with $values.imagePullSecrets }}
      imagePullSecrets:
      {{- range . }}
      - name: {{ . }}
      {{- end }}
      {{- end }}
      {{- with $values.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
        seccompProfile:
          type: RuntimeDefault
      terminationGracePeriodSeconds: 30
      affinity:
      {{- if $values.affinity }}
        {{- toYaml $values.affinity | nindent 8 }}
      {{- else }}
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            podAffinityTerm:
              topologyKey: kubernetes.io/hostname
              labelSelector:
                matchLabels:
                  {{- include "gpuctrl.selector" $component | nindent 18 }}
      {{- end }}
      {{- with $values.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $values.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      containers:
      - name: {{ $component }}
        image: {{ include "gpuctrl.image" $root }}
        imagePullPolicy: {{ $root.Values.image.pullPolicy }}
        args:
        {{- toYaml .args | nindent 8 }}
        {{- with $values.env }}
        env:
        {{- toYaml . | nindent 8 }}
        {{- end }}
        ports:
        {{- toYaml .ports | nindent 8 }}
        livenessProbe:
          httpGet:
            path: /healthz
            port: health
          initialDelaySeconds: 15
          periodSeconds: 20
        readinessProbe:
          httpGet:
            path: /readyz
            port: health
          initialDelaySeconds: 5
          periodSeconds: 10
        resources:
          {{- toYaml $values.resources | nindent 10 }}
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          runAsNonRoot: true
          capabilities:
            drop: ["ALL"]
        volumeMounts:
        {{- with .volumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
        - name: tmp
          mountPath: /tmp
      volumes:
      {{- with .volumes }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
      - name: tmp
        emptyDir: {}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: gpuctrl-{{ $component }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "gpuctrl.labels" (list $root $component) | nindent 4 }}
spec:
  minAvailable: 1
  selector:
    matchLabels:
      {{- include "gpuctrl.selector" $component | nindent 6 }}
---
apiVersion: v1
kind: Service
metadata:
  name: gpuctrl-{{ $component }}-metrics
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "gpuctrl.labels" (list $root $component) | nindent 4 }}
spec:
  selector:
    {{- include "gpuctrl.selector" $component | nindent 4 }}
  ports:
  - name: metrics
    port: 8080
    targetPort: metrics
    protocol: TCP
{{- end }}

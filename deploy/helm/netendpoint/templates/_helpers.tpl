{{/* An image reference: repository[:tag][@digest]. */}}
{{- define "netendpoint.image" -}}
{{- .repository -}}{{- with .tag }}:{{ . }}{{ end -}}{{- with .digest }}@{{ . }}{{ end -}}
{{- end -}}

{{/* The finalizers every pool's leases carry: the agents', unique, as JSON. */}}
{{- define "netendpoint.finalizers" -}}
{{- $f := list -}}
{{- if .Values.watcherExample.enabled }}{{ $f = append $f .Values.watcherExample.finalizer }}{{ end -}}
{{- range $sa, $finalizer := .Values.agents }}{{ $f = append $f $finalizer }}{{ end -}}
{{- toJson (uniq $f) -}}
{{- end -}}

{{/* The network config (conflist) of one pool, as JSON. */}}
{{- define "netendpoint.conflist" -}}
{{- $root := .root -}}
{{- $pool := .pool -}}
{{- $ipam := dict "type" "netendpoint" "pool" $pool.name "ranges" $pool.ranges "crossNode" $root.Values.crossNode -}}
{{- with $pool.routes }}{{ $_ := set $ipam "routes" . }}{{ end -}}
{{- with $pool.exclude }}{{ $_ := set $ipam "exclude" . }}{{ end -}}
{{- $finalizers := include "netendpoint.finalizers" $root | fromJsonArray -}}
{{- if $finalizers }}{{ $_ := set $ipam "finalizers" $finalizers }}{{ end -}}
{{- $ipam = merge $ipam (deepCopy ($root.Values.ipam | default dict)) -}}
{{- $main := deepCopy $root.Values.network.plugin -}}
{{- $_ := set $main "ipam" $ipam -}}
{{- $plugins := prepend (deepCopy ($root.Values.network.extraPlugins | default list)) $main -}}
{{- toPrettyJson (dict "cniVersion" $root.Values.network.cniVersion "name" $pool.name "plugins" $plugins) -}}
{{- end -}}

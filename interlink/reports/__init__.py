"""The gateway's pods as the operator port reports them: ``/pods``, the kubelet's stats summary
and each running pod's usage."""

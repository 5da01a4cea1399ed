# Copyright: gpusplit contributors
# Apache-2.0
"""The gate and runtime-config options of the modules that edit control-plane flags."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  feature_gates:
    description:
      - Gates to set, name to boolean, merged into the component's C(--feature-gates) (the same name
        replaced, other gates kept), in the components the module's description names.
    type: dict
    default: {}
  runtime_config:
    description:
      - C(--runtime-config) entries to set, group/version (or group/version/resource) to value
        (C(true)/C(false)), merged likewise. Only kube-apiserver has this flag.
    type: dict
    default: {}
  remove_feature_gates:
    description: Gate names to delete from C(--feature-gates) (for example gates an upgrade removes).
    type: list
    elements: str
    default: []
  remove_runtime_config:
    description: Keys to delete from C(--runtime-config).
    type: list
    elements: str
    default: []
"""

"""The controller's pure logic: cluster metadata as data, placement and naming rules.

No Ray here: the controller actor (:mod:`raystream.actors.controller`) wires this logic
to replica actors and to its durable metadata log.
"""

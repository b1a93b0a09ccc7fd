"""Consumer groups as pure logic: partition assignors and the rules of rebalancing.

No Ray here: the group coordinator actor drives this code with the members' join
requests and hands the resulting assignment back to the members.
"""
